// The warp-level instructions of sm_80 and later that keep a tile in registers, by their PTX
// names, for kernels_attention_fwd.cu:
//   mma_16816<T>(d, a, b)      d[4] += A (16x16, row-major) times B (16x8, column-major), fp32
//                              accumulators; T = __half or __nv_bfloat16 (mma.sync m16n8k16)
//   ldmatrix_x4(r, p)          four 8x8 matrices of 16-bit elements from shared memory: lane l
//   ldmatrix_x4_trans(r, p)    passes the address of row l % 8 of matrix l / 8 (16-byte aligned),
//                              and r[i] receives its part of matrix i (transposed with _trans)
//   cp_async_16(dst, src, n)   16 bytes from global to shared memory, of which the first n (0 or
//                              16) are read and the rest zero-filled; cp_async_commit() closes a
//                              group, cp_async_wait<N>() waits until at most N groups are pending
//   pack_rn<T>(lo, hi)         two floats rounded to T (nearest even) in one register, lo in the
//                              lower half: an A or B fragment register
// Fragments (PTX ISA, "matrix fragments for mma.m16n8k16"), with g = lane / 4, t = lane % 4 and
// each 32-bit register holding two 16-bit elements, the lower index in the lower half:
//   A: a0 = (row g, cols 2t, 2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B: b0 = (rows 2t, 2t+1, col g), b1 = (rows 2t+8, 2t+9, col g)
//   C, D: d0, d1 = (row g, cols 2t, 2t+1), d2, d3 = (row g+8, cols 2t, 2t+1)
//   ldmatrix: r[i] = (row g, cols 2t, 2t+1) of matrix i; with _trans, (rows 2t, 2t+1, col g).
// Every call is warp-collective (all 32 lanes, converged). nvcc compiles the PTX below; the SIMT
// emulator (tests/gpu_simt/shim/warp_mma_emulated.h) implements the same contracts on the CPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace strata::gpu::cuda {

template <typename T>
__device__ __forceinline__ void mma_16816(float* d, const uint32_t* a, const uint32_t* b);

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float* d, const uint32_t* a,
                                                         const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<__half>(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <typename T>
__device__ __forceinline__ uint32_t pack_rn(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack_rn<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <>
__device__ __forceinline__ uint32_t pack_rn<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* p) {
  const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* p) {
  const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int bytes) {
  const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace strata::gpu::cuda

#else
#include <warp_mma_emulated.h>
#endif
