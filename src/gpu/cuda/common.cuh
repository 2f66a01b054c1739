// Device-side helpers shared by the kernels_*.cu files (CUDA C++17): fp32 loads and
// round-to-nearest-even stores for each storage type, a dtype dispatch, grid sizing and
// deterministic block reductions (fixed tree order for a fixed block size).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "gpu/cuda/launch.h"

namespace strata::gpu::cuda {

template <typename T>
__device__ __forceinline__ float load_f32(const T* p);
template <>
__device__ __forceinline__ float load_f32<float>(const float* p) {
  return *p;
}
template <>
__device__ __forceinline__ float load_f32<__half>(const __half* p) {
  return __half2float(*p);
}
template <>
__device__ __forceinline__ float load_f32<__nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}

template <typename T>
__device__ __forceinline__ void store_f32(T* p, float v);
template <>
__device__ __forceinline__ void store_f32<float>(float* p, float v) {
  *p = v;
}
template <>
__device__ __forceinline__ void store_f32<__half>(__half* p, float v) {
  *p = __float2half_rn(v);
}
template <>
__device__ __forceinline__ void store_f32<__nv_bfloat16>(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}

// 16-byte memory paths: kPack<T> elements of T in one 16-byte load or store (8 fp16/bf16, 4
// fp32), converted to and from fp32 one by one as load_f32 and store_f32 do (so a packed kernel
// gives the bits of the element-by-element one). The address must be 16-byte aligned.
template <typename T>
inline constexpr int kPack = 16 / static_cast<int>(sizeof(T));
// 16 bytes of T, aligned: one 128-bit load or store.
template <typename T>
struct alignas(16) PackOf {
  T e[kPack<T>];
};
template <typename T>
__device__ __forceinline__ void load_pack(const T* p, float* v) {
  const PackOf<T> raw = *reinterpret_cast<const PackOf<T>*>(p);
#pragma unroll
  for (int j = 0; j < kPack<T>; ++j) v[j] = load_f32(&raw.e[j]);
}
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const float* v) {
  PackOf<T> raw;
#pragma unroll
  for (int j = 0; j < kPack<T>; ++j) store_f32(&raw.e[j], v[j]);
  *reinterpret_cast<PackOf<T>*>(p) = raw;
}
// Whether every pointer given (null ones aside) is 16-byte aligned: the packed paths' condition,
// checked on the host at launch.
inline bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) {
    if ((reinterpret_cast<uintptr_t>(p) & 15u) != 0) return false;
  }
  return true;
}

// Calls F::template run<T>(args...) with T the storage type of `t`.
template <typename F, typename... Args>
cudaError_t dispatch(ElemType t, Args&&... args) {
  switch (t) {
    case ElemType::kF32: return F::template run<float>(args...);
    case ElemType::kF16: return F::template run<__half>(args...);
    case ElemType::kBF16: return F::template run<__nv_bfloat16>(args...);
  }
  return cudaErrorInvalidValue;
}

// Returns the launch error of the kernel just enqueued.
inline cudaError_t launch_result() { return cudaGetLastError(); }

// Blocks for a grid-stride loop over n elements with `threads` per block (at least 1).
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 8) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum (or max) of `v` over the whole block, returned to every thread. blockDim.x must be a
// multiple of 32 and at most 1024; every thread of the block must call it. `shared` holds 32
// floats. The order of additions depends only on blockDim.x, so results are reproducible.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* shared) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const float identity = kMax ? -INFINITY : 0.0f;
  float w = lane < warps ? shared[lane] : identity;
  w = kMax ? warp_max(w) : warp_sum(w);
  return w;
}
__device__ __forceinline__ float block_sum(float v, float* shared) {
  return block_reduce<false>(v, shared);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  return block_reduce<true>(v, shared);
}

}  // namespace strata::gpu::cuda
