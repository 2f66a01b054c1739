// The reference matmul of the CUDA emulations (reference_gemm.h).
#include "reference_gemm.h"

#include <cmath>
#include <vector>

namespace simt {
namespace {

// The GELU kernels' operations (kernels_elementwise.cu: GeluOp, GeluGradOp), in the same order.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

float gelu(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

float gelu_grad(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  const float th = tanhf(u);
  const float sech2 = 1.0f - th * th;
  const float du_dx = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
}

// The epilogue of element (i, j) on its fp32 value v: what D stores.
float apply(const GemmEpilogue& e, strata::DType type, int64_t i, int64_t j, float v) {
  if (e.kind == GemmEpilogue::kNone) return v;
  if (e.bias != nullptr && e.kind != GemmEpilogue::kDGelu) {
    v += strata::load_as_f32(e.bias, type, static_cast<size_t>(i));
  }
  const auto at = static_cast<size_t>(i + j * e.ld_aux);
  switch (e.kind) {
    case GemmEpilogue::kGeluAux: strata::store_from_f32(e.aux, type, at, v); return gelu(v);
    case GemmEpilogue::kDGelu: return gelu_grad(strata::load_as_f32(e.aux, type, at)) * v;
    default: return v;
  }
}

}  // namespace

void reference_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const void* a, int64_t lda, const void* b, int64_t ldb, strata::DType ab_type,
                    float beta, const void* c, void* d, int64_t ldc, strata::DType cd_type,
                    const GemmEpilogue& epilogue) {
  // op(A) as a dense row-major [m x k] and op(B) as column-major [k x n]: each dot product reads
  // two contiguous rows.
  std::vector<float> a_rows(static_cast<size_t>(m * k)), b_cols(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const int64_t at = trans_a ? p + i * lda : i + p * lda;
      a_rows[static_cast<size_t>(i * k + p)] =
          strata::load_as_f32(a, ab_type, static_cast<size_t>(at));
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) {
      const int64_t at = trans_b ? j + p * ldb : p + j * ldb;
      b_cols[static_cast<size_t>(j * k + p)] =
          strata::load_as_f32(b, ab_type, static_cast<size_t>(at));
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* bj = b_cols.data() + j * k;
    for (int64_t i = 0; i < m; ++i) {
      const float* ai = a_rows.data() + i * k;
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += ai[p] * bj[p];
      const auto at = static_cast<size_t>(i + j * ldc);
      float v = alpha * acc;
      if (beta != 0.0f) v += beta * strata::load_as_f32(c, cd_type, at);
      strata::store_from_f32(d, cd_type, at, apply(epilogue, cd_type, i, j, v));
    }
  }
}

}  // namespace simt
