// Internal to strata_cpu: the per-ISA chunk kernels behind CpuAdam, grad_check and
// cast_params_16. Each kernel works on one chunk (any length; the tail that does not fill a SIMD
// vector goes through a zero-padded stack copy) and is called from oneTBB worker threads on
// disjoint chunks. Kernels never allocate and keep no state; they are thread-safe.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cpu/cpu_adam.h"

namespace strata::cpu::detail {

using AdamConsts = AdamConstants;

enum class OutKind : int { kNone = 0, kF16 = 1, kBF16 = 2 };

// Updates n elements in place; out16 (of kind `out`, ignored when kNone) receives the new params.
// stream: use non-temporal stores for out16 where the address allows (ends with a store fence).
using AdamChunkFn = void (*)(const AdamConsts& k, float* p, float* m, float* v, const void* g,
                             void* out16, int64_t n, bool stream);
// Sum of g^2 over n elements (unscaled), in 16 fp64 lanes (element i -> lane i % 16, each
// product exact in fp64), lanes then summed 0..15 in order: identical bits on every ISA.
using SumSquaresFn = double (*)(const void* g, int64_t n);
// Writes n fp32 values as fp16/bf16 (round to nearest even).
using Cast16Fn = void (*)(const float* src, void* dst, int64_t n, bool stream);

AdamChunkFn adam_kernel_scalar(DType grad, OutKind out, bool l2, bool decoupled);
SumSquaresFn sum_squares_kernel_scalar(DType grad);
Cast16Fn cast16_kernel_scalar(OutKind out);

AdamChunkFn adam_kernel_avx2(DType grad, OutKind out, bool l2, bool decoupled);
SumSquaresFn sum_squares_kernel_avx2(DType grad);
Cast16Fn cast16_kernel_avx2(OutKind out);

AdamChunkFn adam_kernel_avx512(DType grad, OutKind out, bool l2, bool decoupled);
SumSquaresFn sum_squares_kernel_avx512(DType grad);
Cast16Fn cast16_kernel_avx512(OutKind out);

}  // namespace strata::cpu::detail
