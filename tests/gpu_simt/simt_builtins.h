// The device-side built-ins of CUDA C++ for the emulated kernels (see simt_cuda.h): threadIdx,
// blockIdx, blockDim, gridDim, __syncthreads, __syncwarp, __shfl_sync, __shfl_xor_sync, min, max
// and __launch_bounds__.
// Included only through shim/cuda_runtime.h, i.e. by the kernels' translation units.
#pragma once

#include "simt_cuda.h"

#define threadIdx (::simt::thread_idx())
#define blockIdx (::simt::block_idx())
#define blockDim (::simt::block_dim())
#define gridDim (::simt::grid_dim())
#define __launch_bounds__(...)
inline void __syncthreads() { ::simt::sync_block(); }
// Full masks only, as everywhere in the emulator.
inline void __syncwarp(unsigned = 0xffffffffu) { ::simt::warp_converge(); }
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
