#include "core/dtype.h"

#include <cstring>

namespace strata {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
  }
  return "?";
}

Result<DType> parse_dtype(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "fp16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  return make_error(ErrorCode::kConfig, "dtype '", name,
                    "' is not accepted (use fp32, fp16 or bf16)");
}

void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  if (src_type == dst_type) {
    std::memmove(dst, src, n * dtype_size(src_type));
    return;
  }
  for (size_t i = 0; i < n; ++i) store_from_f32(dst, dst_type, i, load_as_f32(src, src_type, i));
}

}  // namespace strata
