#include "model/safetensors_export.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/interrupt.h"
#include "model/gpt.h"
#include "model/param_layout.h"

namespace strata::model {

namespace {
// One exported tensor: where it lies in its block, its exported shape, and whether the block's
// [rows, cols] matrix is written transposed.
struct Export {
  std::string name;
  int64_t block, offset, rows, cols;
  bool transpose;
};

std::vector<Export> exports(const GptConfig& c) {
  const int64_t C = c.channels, L = c.layers;
  TensorSpan st[4], lt[12];
  shared_tensors(c, st);
  layer_tensors(c, lt);
  std::vector<Export> out;
  out.push_back({"wte.weight", L, st[0].offset, c.vocab, C, false});  // the real rows only
  out.push_back({"wpe.weight", L, st[1].offset, c.max_seq, C, false});
  // HF's names of the 12 layer tensors, and whether a weight is transposed to [in, out].
  const char* names[12] = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                           "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                           "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                           "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  for (int64_t l = 0; l < L; ++l) {
    for (int t = 0; t < 12; ++t) {
      const bool weight = lt[t].rows > 1;
      out.push_back({"h." + std::to_string(l) + "." + names[t], l, lt[t].offset,
                     weight ? lt[t].rows : 1, lt[t].numel / (weight ? lt[t].rows : 1), weight});
    }
  }
  out.push_back({"ln_f.weight", L, st[2].offset, 1, C, false});
  out.push_back({"ln_f.bias", L, st[3].offset, 1, C, false});
  return out;
}
}  // namespace

Status write_safetensors(const std::string& path, const GptConfig& config, DType stored,
                         const BlockSource& source) {
  if (stored != DType::kF32 && stored != DType::kBF16) {
    return make_error(ErrorCode::kConfig, "safetensors file ", path, ": values as ",
                      dtype_name(stored), " are not accepted (F32 or BF16)");
  }
  STRATA_RETURN_IF_ERROR(config.validate());
  const size_t es = dtype_size(stored);
  const std::vector<Export> ex = exports(config);
  std::ostringstream h;
  h << "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t at = 0;
  for (const Export& e : ex) {
    const uint64_t bytes = static_cast<uint64_t>(e.rows * e.cols) * es;
    h << ",\"" << e.name << "\":{\"dtype\":\"" << (stored == DType::kF32 ? "F32" : "BF16")
      << "\",\"shape\":[";
    if (e.rows == 1) {
      h << e.cols;
    } else if (e.transpose) {
      h << e.cols << "," << e.rows;  // [in, out]
    } else {
      h << e.rows << "," << e.cols;
    }
    h << "],\"data_offsets\":[" << at << "," << at + bytes << "]}";
    at += bytes;
  }
  h << "}";
  std::string header = h.str();
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  const CleanupPath cleanup(tmp);  // an interrupted exit removes it (core/interrupt.h)
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return make_error(ErrorCode::kIo, "safetensors file ", path, ": cannot create ", tmp);
    const uint64_t header_bytes = header.size();  // little-endian on every platform we build for
    f.write(reinterpret_cast<const char*>(&header_bytes), 8);
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    // Blocks in the order the tensors are written: the shared block (wte, wpe) first, the
    // layers, then ln_f from the shared block still held.
    std::vector<float> shared(static_cast<size_t>(GptModel::block_numel(config, config.layers)));
    std::vector<float> layer, out;
    std::vector<std::byte> raw;
    Status st = source(config.layers, shared.data());
    int64_t loaded = -1;
    for (const Export& e : ex) {
      if (!st.ok()) break;
      if (e.block != config.layers && e.block != loaded) {
        layer.assign(static_cast<size_t>(GptModel::block_numel(config, e.block)), 0.0f);
        st = source(e.block, layer.data());
        loaded = e.block;
        if (!st.ok()) break;
      }
      const float* src = (e.block == config.layers ? shared.data() : layer.data()) + e.offset;
      const auto n = static_cast<size_t>(e.rows * e.cols);
      out.assign(src, src + n);
      if (e.transpose) {  // [rows=out, cols=in] -> [in, out]
        for (int64_t r = 0; r < e.rows; ++r) {
          for (int64_t k = 0; k < e.cols; ++k) out[size_t(k * e.rows + r)] = src[r * e.cols + k];
        }
      }
      raw.resize(n * es);
      convert(out.data(), DType::kF32, raw.data(), stored, n);
      f.write(reinterpret_cast<const char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
    }
    f.flush();
    if (st.ok() && !f) st = make_error(ErrorCode::kIo, "safetensors file ", path, ": write failed");
    if (!st.ok()) {
      f.close();
      std::filesystem::remove(tmp);
      return st;
    }
  }
  // Sync the data, then the rename.
  if (FILE* fp = std::fopen(tmp.c_str(), "rb+")) {
    std::fflush(fp);
    ::fsync(fileno(fp));
    std::fclose(fp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    return make_error(ErrorCode::kIo, "safetensors file ", path, ": cannot rename ", tmp, ": ",
                      ec.message());
  }
  return ok_status();
}

}  // namespace strata::model
