#include "model/safetensors_export.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/safetensors_write.h"

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
  // Blocks in the order the tensors are written: the shared block (wte, wpe) first, the layers,
  // then ln_f from the shared block still held.
  auto blocks = std::make_shared<HeldBlocks>(
      [&config](int64_t b) { return GptModel::block_numel(config, b); }, config.layers, source);
  std::vector<TensorOut> tensors;
  for (const Export& e : exports(config)) {
    std::vector<int64_t> shape;
    if (e.rows == 1) {
      shape = {e.cols};
    } else if (e.transpose) {
      shape = {e.cols, e.rows};  // [in, out]
    } else {
      shape = {e.rows, e.cols};
    }
    tensors.push_back({e.name, shape, [e, blocks](float* out) -> Status {
                         STRATA_ASSIGN_OR_RETURN(const float* held, blocks->get(e.block));
                         const float* src = held + e.offset;
                         if (!e.transpose) {
                           std::copy(src, src + e.rows * e.cols, out);
                           return ok_status();
                         }
                         for (int64_t r = 0; r < e.rows; ++r) {  // [out, in] -> [in, out]
                           for (int64_t k = 0; k < e.cols; ++k) {
                             out[k * e.rows + r] = src[r * e.cols + k];
                           }
                         }
                         return ok_status();
                       }});
  }
  return write_safetensors_file(path, tensors, stored);
}

}  // namespace strata::model
