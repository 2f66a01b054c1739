// The reference matmul of the CUDA emulations (reference_gemm.h).
#include "reference_gemm.h"

#include <vector>

namespace simt {

void reference_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const void* a, int64_t lda, const void* b, int64_t ldb, strata::DType ab_type,
                    float beta, const void* c, void* d, int64_t ldc, strata::DType cd_type) {
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
      strata::store_from_f32(d, cd_type, at, v);
    }
  }
}

}  // namespace simt
