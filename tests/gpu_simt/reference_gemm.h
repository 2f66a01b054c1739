// The matmul both CUDA emulations compute: the emulated cuBLASLt (tests/cuda_emu) and the SIMT
// device's matmul (simt_device.cpp), so that a step on the emulated CudaDevice and on the SIMT
// device give the same bits. Column-major, as cuBLAS:
//   D[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C   (C not read when beta == 0)
// with A stored [m x k] (lda >= m), or [k x m] when trans_a (lda >= k), likewise B; each element
// summed in fp32 over k in ascending order from widened operands, then rounded once to D's type
// (C and D may be one buffer). A reference, not fast.
//
// The epilogue (cuBLASLt's, as strata uses them) works on each element's fp32 value
// v = alpha * acc + beta * C before that rounding: kBias adds bias[i] (a vector of D's type, one
// element a row of D); kGeluAux (with or without the bias) stores v into aux[i + j * ld_aux] and
// D = gelu(v); kDGelu reads aux (the GELU's input) and D = gelu'(aux) * v. aux has D's type;
// gelu and gelu' are the tanh form of the GELU kernels (kernels_elementwise.cu) in fp32.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace simt {

struct GemmEpilogue {
  enum Kind { kNone, kBias, kGeluAux, kDGelu } kind = kNone;
  const void* bias = nullptr;  // kBias; kGeluAux when not null
  void* aux = nullptr;         // kGeluAux: written; kDGelu: read
  int64_t ld_aux = 0;
};

void reference_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const void* a, int64_t lda, const void* b, int64_t ldb, strata::DType ab_type,
                    float beta, const void* c, void* d, int64_t ldc, strata::DType cd_type,
                    const GemmEpilogue& epilogue = {});

}  // namespace simt
