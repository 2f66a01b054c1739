// The device-side built-ins of CUDA C++ for the emulated kernels (see simt_cuda.h): threadIdx,
// blockIdx, blockDim, gridDim, __syncthreads, __shfl_sync, __shfl_xor_sync, min and max.
// Included only through shim/cuda_runtime.h, i.e. by the kernels' translation units.
#pragma once

#include "simt_cuda.h"

#define threadIdx (::simt::thread_idx())
#define blockIdx (::simt::block_idx())
#define blockDim (::simt::block_dim())
#define gridDim (::simt::grid_dim())
inline void __syncthreads() { ::simt::sync_block(); }
template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return ::simt::shuffle(mask, v, src_lane, width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::simt::shuffle(mask, v, ::simt::lane_id() ^ lane_mask, width);
}
template <typename T>
T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
T max(T a, T b) {
  return a < b ? b : a;
}
