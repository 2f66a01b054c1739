#include "model/token_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace strata::model {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

Result<int64_t> check_token_file_header(const std::string& path, const int32_t* header,
                                        uint64_t file_size) {
  if (header[0] != kTokenFileMagic) {
    return make_error(ErrorCode::kCorrupt, "token file ", path, ": bad magic ", header[0],
                      " (expected ", kTokenFileMagic, ")");
  }
  if (header[1] != kTokenFileVersion) {
    return make_error(ErrorCode::kCorrupt, "token file ", path, ": unsupported version ", header[1],
                      " (expected ", kTokenFileVersion, ", uint16 tokens)");
  }
  if (header[2] < 0) {
    return make_error(ErrorCode::kCorrupt, "token file ", path, ": negative token count ",
                      header[2]);
  }
  const auto count = static_cast<uint64_t>(header[2]);
  const uint64_t expected = kTokenFileHeaderBytes + 2 * count;
  if (file_size != expected) {
    return make_error(ErrorCode::kCorrupt, "token file ", path, ": size ", file_size,
                      " bytes does not match the header's ", count, " tokens (expected ", expected,
                      " bytes", file_size < expected ? ", truncated" : "", ")");
  }
  return static_cast<int64_t>(count);
}

Result<std::vector<uint16_t>> read_token_file(const std::string& path, int64_t vocab) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    return make_error(ErrorCode::kIo, "token file ", path, ": cannot open: ", std::strerror(errno));
  }
  int32_t header[256] = {};
  if (std::fread(header, 1, sizeof(header), f.get()) != sizeof(header)) {
    return make_error(ErrorCode::kCorrupt, "token file ", path,
                      ": truncated header (needs 1024 bytes)");
  }
  if (std::fseek(f.get(), 0, SEEK_END) != 0) {
    return make_error(ErrorCode::kIo, "token file ", path, ": cannot seek: ", std::strerror(errno));
  }
  const long size = std::ftell(f.get());
  if (size < 0) {
    return make_error(ErrorCode::kIo, "token file ", path,
                      ": cannot tell its size: ", std::strerror(errno));
  }
  STRATA_ASSIGN_OR_RETURN(const int64_t n,
                          check_token_file_header(path, header, static_cast<uint64_t>(size)));
  const auto count = static_cast<size_t>(n);
  if (std::fseek(f.get(), static_cast<long>(kTokenFileHeaderBytes), SEEK_SET) != 0) {
    return make_error(ErrorCode::kIo, "token file ", path, ": cannot seek: ", std::strerror(errno));
  }
  std::vector<uint16_t> tokens(count);
  if (count > 0 && std::fread(tokens.data(), 2, count, f.get()) != count) {
    return make_error(ErrorCode::kIo, "token file ", path, ": short read of ", count, " tokens");
  }
  for (size_t i = 0; i < count; ++i) {
    if (static_cast<int64_t>(tokens[i]) >= vocab) {
      return make_error(ErrorCode::kCorrupt, "token file ", path, ": token ", tokens[i],
                        " at index ", i, " is not below the vocabulary size ", vocab);
    }
  }
  return tokens;
}

Status write_token_file(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > 0x7fffffffu) {
    return make_error(ErrorCode::kConfig, "token file ", path, ": ", tokens.size(),
                      " tokens do not fit the int32 count of the header");
  }
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) {
    return make_error(ErrorCode::kIo, "token file ", path,
                      ": cannot create: ", std::strerror(errno));
  }
  int32_t header[256] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  if (std::fwrite(header, 1, sizeof(header), f.get()) != sizeof(header) ||
      (!tokens.empty() && std::fwrite(tokens.data(), 2, tokens.size(), f.get()) != tokens.size())) {
    return make_error(ErrorCode::kIo, "token file ", path,
                      ": write failed: ", std::strerror(errno));
  }
  if (std::fclose(f.release()) != 0) {
    return make_error(ErrorCode::kIo, "token file ", path,
                      ": close failed: ", std::strerror(errno));
  }
  return ok_status();
}

}  // namespace strata::model
