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

void decode_tokens(const std::byte* raw, int token_bytes, size_t count, uint32_t* out) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t v = 0;
    if (token_bytes == 2) {
      uint16_t h = 0;
      std::memcpy(&h, raw + 2 * i, 2);
      v = h;
    } else {
      std::memcpy(&v, raw + 4 * i, 4);
    }
    out[i] = v;
  }
}

Result<TokenFileFormat> token_file_format(const std::string& path, const int32_t* header,
                                          uint64_t file_size) {
  TokenFileFormat fmt;
  if (header[0] == kTokenFileMagic) {
    fmt.token_bytes = 2;
    if (header[1] != kTokenFileVersion) {
      return make_error(ErrorCode::kCorrupt, "token file ", path, ": unsupported version ",
                        header[1], " (expected ", kTokenFileVersion, " for magic ", kTokenFileMagic,
                        ", uint16 tokens)");
    }
  } else if (header[0] == kTokenFileMagicLlama3) {
    fmt.token_bytes = 4;
    if (header[1] != kTokenFileVersionLlama3) {
      return make_error(ErrorCode::kCorrupt, "token file ", path, ": unsupported version ",
                        header[1], " (expected ", kTokenFileVersionLlama3, " for magic ",
                        kTokenFileMagicLlama3, ", uint32 tokens)");
    }
  } else {
    return make_error(ErrorCode::kCorrupt, "token file ", path, ": bad magic ", header[0],
                      " (expected ", kTokenFileMagic, ": GPT-2 tokens, or ", kTokenFileMagicLlama3,
                      ": llama-3 tokens)");
  }
  if (header[2] < 0) {
    return make_error(ErrorCode::kCorrupt, "token file ", path, ": negative token count ",
                      header[2]);
  }
  const auto count = static_cast<uint64_t>(header[2]);
  const uint64_t expected = kTokenFileHeaderBytes + uint64_t(fmt.token_bytes) * count;
  if (file_size != expected) {
    return make_error(ErrorCode::kCorrupt, "token file ", path, ": size ", file_size,
                      " bytes does not match the header's ", count, " tokens (expected ", expected,
                      " bytes", file_size < expected ? ", truncated" : "", ")");
  }
  fmt.count = static_cast<int64_t>(count);
  return fmt;
}

Result<std::vector<uint32_t>> read_token_file(const std::string& path, int64_t vocab) {
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
  STRATA_ASSIGN_OR_RETURN(const TokenFileFormat fmt,
                          token_file_format(path, header, static_cast<uint64_t>(size)));
  const auto count = static_cast<size_t>(fmt.count);
  if (std::fseek(f.get(), static_cast<long>(kTokenFileHeaderBytes), SEEK_SET) != 0) {
    return make_error(ErrorCode::kIo, "token file ", path, ": cannot seek: ", std::strerror(errno));
  }
  std::vector<std::byte> raw(count * size_t(fmt.token_bytes));
  if (count > 0 && std::fread(raw.data(), size_t(fmt.token_bytes), count, f.get()) != count) {
    return make_error(ErrorCode::kIo, "token file ", path, ": short read of ", count, " tokens");
  }
  std::vector<uint32_t> tokens(count);
  decode_tokens(raw.data(), fmt.token_bytes, count, tokens.data());
  for (size_t i = 0; i < count; ++i) {
    if (static_cast<int64_t>(tokens[i]) >= vocab) {
      return make_error(ErrorCode::kCorrupt, "token file ", path, ": token ", tokens[i],
                        " at index ", i, " is not below the vocabulary size ", vocab);
    }
  }
  return tokens;
}

namespace {
Status write_tokens(const std::string& path, int32_t magic, int32_t version, const void* tokens,
                    size_t count, size_t token_bytes) {
  if (count > 0x7fffffffu) {
    return make_error(ErrorCode::kConfig, "token file ", path, ": ", count,
                      " tokens do not fit the int32 count of the header");
  }
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) {
    return make_error(ErrorCode::kIo, "token file ", path,
                      ": cannot create: ", std::strerror(errno));
  }
  int32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(count);
  if (std::fwrite(header, 1, sizeof(header), f.get()) != sizeof(header) ||
      (count > 0 && std::fwrite(tokens, token_bytes, count, f.get()) != count)) {
    return make_error(ErrorCode::kIo, "token file ", path,
                      ": write failed: ", std::strerror(errno));
  }
  if (std::fclose(f.release()) != 0) {
    return make_error(ErrorCode::kIo, "token file ", path,
                      ": close failed: ", std::strerror(errno));
  }
  return ok_status();
}
}  // namespace

Status write_token_file(const std::string& path, const std::vector<uint16_t>& tokens) {
  return write_tokens(path, kTokenFileMagic, kTokenFileVersion, tokens.data(), tokens.size(), 2);
}

Status write_token_file32(const std::string& path, const std::vector<uint32_t>& tokens) {
  return write_tokens(path, kTokenFileMagicLlama3, kTokenFileVersionLlama3, tokens.data(),
                      tokens.size(), 4);
}

}  // namespace strata::model
