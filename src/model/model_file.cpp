#include "model/model_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/replace_file.h"

namespace strata::model {

namespace {
constexpr size_t kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * 4;

// Where each tensor of block b lies in the file, in elements after the header: (block offset,
// file offset, count) for every tensor.
struct Piece {
  int64_t block_offset, file_offset, numel;
  const char* name;
};
std::vector<Piece> pieces(const GptConfig& c, int64_t b) {
  TensorSpan shared[4], layer[12];
  shared_tensors(c, shared);
  layer_tensors(c, layer);
  const int64_t head = shared[0].numel + shared[1].numel;  // wte, wpe
  const int64_t layer_numel = layer[11].offset + layer[11].numel;
  std::vector<Piece> out;
  if (b == c.layers) {
    out.push_back({shared[0].offset, 0, shared[0].numel, shared[0].name});
    out.push_back({shared[1].offset, shared[0].numel, shared[1].numel, shared[1].name});
    const int64_t tail = head + c.layers * layer_numel;  // lnfw, lnfb
    out.push_back({shared[2].offset, tail, shared[2].numel, shared[2].name});
    out.push_back({shared[3].offset, tail + shared[2].numel, shared[3].numel, shared[3].name});
    return out;
  }
  for (int t = 0; t < 12; ++t) {
    // Tensor t of every layer comes after tensors 0..t-1 of every layer.
    out.push_back({layer[t].offset, head + c.layers * layer[t].offset + b * layer[t].numel,
                   layer[t].numel, layer[t].name});
  }
  return out;
}

std::string errno_text() { return std::strerror(errno); }

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status read_exact(int fd, void* dst, size_t bytes, uint64_t offset, const std::string& path) {
  auto* p = static_cast<std::byte*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return make_error(ErrorCode::kIo, "model file ", path, ": cannot read ", bytes,
                        " bytes at offset ", offset, n < 0 ? ": " + errno_text() : ": short file");
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return ok_status();
}

Status write_exact(int fd, const void* src, size_t bytes, uint64_t offset,
                   const std::string& path) {
  const auto* p = static_cast<const std::byte*>(src);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return make_error(ErrorCode::kIo, "model file ", path, ": cannot write ", bytes,
                        " bytes at offset ", offset, ": ", errno_text());
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return ok_status();
}
}  // namespace

Result<GptConfig> read_model_file_config(const std::string& path) {
  Fd f;
  // Without blocking, and only a regular file (a FIFO without a writer is refused at once).
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f.fd < 0) {
    return make_error(ErrorCode::kIo, "model file ", path, ": cannot open: ", errno_text());
  }
  int32_t h[kHeaderInts];
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    return make_error(ErrorCode::kIo, "model file ", path, ": cannot stat: ", errno_text());
  }
  if (!S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::kConfig, "model file ", path,
                      " is not a regular file (a directory, a pipe or a device)");
  }
  if (static_cast<uint64_t>(st.st_size) < kHeaderBytes) {
    return make_error(ErrorCode::kCorrupt, "model file ", path, ": ", st.st_size,
                      " bytes, shorter than its 1024-byte header");
  }
  STRATA_RETURN_IF_ERROR(read_exact(f.fd, h, kHeaderBytes, 0, path));
  if (h[0] != kModelFileMagic) {
    return make_error(ErrorCode::kCorrupt, "model file ", path, ": magic ", h[0],
                      " is not llm.c's GPT-2 model magic ", kModelFileMagic);
  }
  if (h[1] != kModelFileVersionF32 && h[1] != kModelFileVersionBF16) {
    return make_error(ErrorCode::kCorrupt, "model file ", path, ": version ", h[1],
                      " is not accepted (3: fp32, 5: bf16)");
  }
  GptConfig c;
  c.max_seq = h[2];
  c.vocab = h[3];
  c.layers = h[4];
  c.heads = h[5];
  c.channels = h[6];
  c.padded_vocab = h[7];
  c.dtype = h[1] == kModelFileVersionF32 ? DType::kF32 : DType::kBF16;
  if (Status v = c.validate(); !v.ok()) {
    return make_error(ErrorCode::kCorrupt, "model file ", path,
                      ": the header's shape: ", v.message());
  }
  const uint64_t want = kHeaderBytes + static_cast<uint64_t>(c.num_params()) * dtype_size(c.dtype);
  if (static_cast<uint64_t>(st.st_size) != want) {
    return make_error(ErrorCode::kCorrupt, "model file ", path, ": ", st.st_size, " bytes, but ",
                      c.describe(), " needs ", want, " (",
                      static_cast<uint64_t>(st.st_size) < want ? "truncated" : "trailing bytes",
                      ")");
  }
  return c;
}

Status read_model_file(const std::string& path, const GptConfig& expect, const BlockSink& sink) {
  STRATA_ASSIGN_OR_RETURN(const GptConfig c, read_model_file_config(path));
  if (c.max_seq != expect.max_seq || c.vocab != expect.vocab || c.vp() != expect.vp() ||
      c.layers != expect.layers || c.heads != expect.heads || c.channels != expect.channels) {
    return make_error(ErrorCode::kConfig, "model file ", path, " holds ", c.describe(),
                      ", not the ", expect.describe(), " asked for");
  }
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f.fd < 0) {
    return make_error(ErrorCode::kIo, "model file ", path, ": cannot open: ", errno_text());
  }
  const size_t es = dtype_size(c.dtype);
  std::vector<float> block;
  std::vector<std::byte> raw;
  for (int64_t b = 0; b <= c.layers; ++b) {
    block.assign(static_cast<size_t>(GptModel::block_numel(c, b)), 0.0f);
    for (const Piece& p : pieces(c, b)) {
      raw.resize(static_cast<size_t>(p.numel) * es);
      STRATA_RETURN_IF_ERROR(read_exact(f.fd, raw.data(), raw.size(),
                                        kHeaderBytes + static_cast<uint64_t>(p.file_offset) * es,
                                        path));
      float* values = block.data() + p.block_offset;
      convert(raw.data(), c.dtype, values, DType::kF32, static_cast<size_t>(p.numel));
      for (int64_t i = 0; i < p.numel; ++i) {
        if (std::isfinite(values[i])) continue;
        return make_error(ErrorCode::kCorrupt, "model file ", path, ": tensor ", p.name,
                          b < c.layers ? " of layer " + std::to_string(b) : std::string(),
                          " holds ", values[i], " at element ", i,
                          " (a model with non-finite values cannot be trained)");
      }
    }
    STRATA_RETURN_IF_ERROR(sink(b, block.data()));
  }
  return ok_status();
}

Status write_model_file(const std::string& path, const GptConfig& config, DType stored,
                        const BlockSource& source, bool sync) {
  if (stored != DType::kF32 && stored != DType::kBF16) {
    return make_error(ErrorCode::kConfig, "model file ", path, ": values as ", dtype_name(stored),
                      " are not accepted (fp32: version 3, bf16: version 5)");
  }
  STRATA_RETURN_IF_ERROR(config.validate());
  return write_replacing(path, "model file " + path, sync, [&](int fd) -> Status {
    int32_t h[kHeaderInts] = {};
    h[0] = kModelFileMagic;
    h[1] = stored == DType::kF32 ? kModelFileVersionF32 : kModelFileVersionBF16;
    h[2] = static_cast<int32_t>(config.max_seq);
    h[3] = static_cast<int32_t>(config.vocab);
    h[4] = static_cast<int32_t>(config.layers);
    h[5] = static_cast<int32_t>(config.heads);
    h[6] = static_cast<int32_t>(config.channels);
    h[7] = static_cast<int32_t>(config.vp());
    STRATA_RETURN_IF_ERROR(write_exact(fd, h, kHeaderBytes, 0, path));
    const size_t es = dtype_size(stored);
    std::vector<float> block;
    std::vector<std::byte> raw;
    for (int64_t b = 0; b <= config.layers; ++b) {
      block.assign(static_cast<size_t>(GptModel::block_numel(config, b)), 0.0f);
      STRATA_RETURN_IF_ERROR(source(b, block.data()));
      for (const Piece& p : pieces(config, b)) {
        raw.resize(static_cast<size_t>(p.numel) * es);
        convert(block.data() + p.block_offset, DType::kF32, raw.data(), stored,
                static_cast<size_t>(p.numel));
        STRATA_RETURN_IF_ERROR(write_exact(fd, raw.data(), raw.size(),
                                           kHeaderBytes + static_cast<uint64_t>(p.file_offset) * es,
                                           path));
      }
    }
    return ok_status();
  });
}

}  // namespace strata::model
