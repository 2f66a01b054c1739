// The matmul both CUDA emulations compute: the emulated cuBLASLt (tests/cuda_emu) and the SIMT
// device's matmul (simt_device.cpp), so that a step on the emulated CudaDevice and on the SIMT
// device give the same bits. Column-major, as cuBLAS:
//   D[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C   (C not read when beta == 0)
// with A stored [m x k] (lda >= m), or [k x m] when trans_a (lda >= k), likewise B; each element
// summed in fp32 over k in ascending order from widened operands, then rounded once to D's type
// (C and D may be one buffer). A reference, not fast.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace simt {

void reference_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const void* a, int64_t lda, const void* b, int64_t ldb, strata::DType ab_type,
                    float beta, const void* c, void* d, int64_t ldc, strata::DType cd_type);

}  // namespace simt
