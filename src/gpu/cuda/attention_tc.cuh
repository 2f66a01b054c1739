// What the tensor-core attention kernels share (kernels_attention_fwd.cu: the forward,
// kernels_attention_bwd.cu: the backward): the tile shape, the geometry of a call, where a block
// works, the tiles' copies into shared memory, a warp's register-tile products (warp_mma.cuh),
// the 16-byte row writes, D = dout . out, the launch grid and the dispatch on the 16-bit type and
// head size.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "gpu/cuda/common.cuh"
#include "gpu/cuda/launch.h"
#include "gpu/cuda/warp_mma.cuh"

namespace strata::gpu::cuda::attention_tc {

constexpr int kRows = 64;    // rows a block owns, and rows of the other side per tile
constexpr int kTcWarps = 4;  // 16 rows each
constexpr unsigned kAll = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;
// 16-bit elements per row of a [64][HS] tile in shared memory: 16 bytes of padding, so the 8
// rows of an 8x8 matrix (ldmatrix) start in 8 different 16-byte bank groups.
template <int HS>
inline constexpr int kLdTile = HS + 8;
template <int HS>
inline constexpr size_t kTileElems = size_t{kRows} * kLdTile<HS>;  // of one [64][HS + 8] tile

struct Geo {
  int T, C, NH, NKV;
  int group;  // NH / NKV
  int width;  // qkv row: C + 2 * NKV * HS
  float scale;
  bool vec;  // 16-byte copies are aligned (C and width % 8 == 0, 16-byte aligned tensors)
};

// Where a block works: query head h of batch b, as offsets into qkv (row stride `width`) of its
// q head and of its group's k and v heads, into [B, T, C] tensors, and its lse row.
struct Head {
  int64_t stride;   // qkv's row: C + 2 * NKV * HS
  int64_t q, k, v;  // (b, row 0, head) in qkv
  int64_t btc;      // (b, row 0, head h) in out / dout
  int64_t lse;      // (b, h, row 0) in lse
};
template <int HS>
__device__ __forceinline__ Head head_at(const Geo& g, int b, int h) {
  Head hd;
  const int kvh = h / g.group;
  hd.stride = g.width;
  const int64_t row0 = int64_t{b} * g.T * hd.stride;
  hd.q = row0 + int64_t{h} * HS;
  hd.k = row0 + g.C + int64_t{kvh} * HS;
  hd.v = row0 + g.C + int64_t{g.NKV + kvh} * HS;
  hd.btc = int64_t{b} * g.T * g.C + int64_t{h} * HS;
  hd.lse = (int64_t{b} * g.NH + h) * g.T;
  return hd;
}
// The forward and dq kernels: query head blockIdx.y of batch blockIdx.z.
template <int HS>
__device__ __forceinline__ Head head_of_block(const Geo& g) {
  return head_at<HS>(g, static_cast<int>(blockIdx.z), static_cast<int>(blockIdx.y));
}

// Copies rows row0 .. row0+63 of a [T, stride] tensor (from `base`, HS columns) into a
// [64][ldk] tile; rows at or past T are zero. Called by the whole block.
template <typename T, int HS>
__device__ void load_rows(T* tile, const T* base, int64_t stride, int row0, const Geo& g) {
  constexpr int ldk = kLdTile<HS>;
  if (g.vec) {
    constexpr int per_row = HS / 8;
    for (int e = threadIdx.x; e < kRows * per_row; e += blockDim.x) {
      const int j = e / per_row;
      const int c = (e % per_row) * 8;
      const int row = row0 + j;
      uint4 v = {0u, 0u, 0u, 0u};
      if (row < g.T) v = *reinterpret_cast<const uint4*>(base + row * stride + c);
      *reinterpret_cast<uint4*>(tile + j * ldk + c) = v;
    }
  } else {
    for (int e = threadIdx.x; e < kRows * HS; e += blockDim.x) {
      const int j = e / HS;
      const int c = e % HS;
      const int row = row0 + j;
      if (row < g.T) {
        tile[j * ldk + c] = base[row * stride + c];
      } else {
        store_f32(tile + j * ldk + c, 0.0f);
      }
    }
  }
}

// Rows row0 .. row0+63 of a [T, stride] tensor into a [64][HS + 8] tile, rows past T zero:
// 16-byte asynchronous copies (the caller commits and waits), or, unaligned, load_rows.
template <typename T, int HS>
__device__ void stage_rows(T* tile, const T* base, int64_t stride, int row0, const Geo& g) {
  if (!g.vec) {
    load_rows<T, HS>(tile, base, stride, row0, g);
    return;
  }
  constexpr int per_row = HS / 8;
  for (int e = threadIdx.x; e < kRows * per_row; e += blockDim.x) {
    const int j = e / per_row;
    const int c = (e % per_row) * 8;
    const int row = row0 + j;
    const bool in = row < g.T;
    cp_async_16(tile + j * kLdTile<HS> + c, base + (in ? row * stride + c : 0), in ? 16 : 0);
  }
}

// Register tiles of one warp (warp_mma.cuh's fragments): a warp owns 16 rows; with gr = lane / 4
// and tq = lane % 4 its accumulators hold rows gr and gr + 8, columns 2 tq and 2 tq + 1 of each
// 8-column block.
constexpr int kColBlocks = kRows / 8;  // 16x8 accumulators of a warp's 16 x 64 scores

// A fragments of a warp's 16 rows (`rows`: a [16][HS + 8] slice of a tile), one per 16 columns.
template <typename T, int HS>
__device__ __forceinline__ void load_a(uint32_t (&af)[HS / 16][4], const T* rows) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    ldmatrix_x4(af[kk], rows + (lane % 16) * kLdTile<HS> + kk * 16 + (lane / 16) * 8);
  }
}

// s[j] = A B^T for column block j: A the warp's 16 rows (fragments), B a [64][HS + 8] tile
// whose rows 8j .. 8j+7 are block j's columns. 8 * HS / 16 mma.
template <typename T, int HS>
__device__ __forceinline__ void times_tile_t(float (&s)[kColBlocks][4],
                                             const uint32_t (&af)[HS / 16][4], const T* b) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int j = 0; j < kColBlocks; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
#pragma unroll
    for (int jj = 0; jj < kColBlocks / 2; ++jj) {
      uint32_t bf[4];  // bf[0..1]: column block 2jj, bf[2..3]: 2jj + 1
      ldmatrix_x4(bf, b + (jj * 16 + lane % 8 + (lane / 16) * 8) * kLdTile<HS> + kk * 16 +
                          ((lane / 8) % 2) * 8);
      mma_16816<T>(s[2 * jj], af[kk], bf);
      mma_16816<T>(s[2 * jj + 1], af[kk], bf + 2);
    }
  }
}

// The 16 x 64 accumulators rounded to T as A fragments (columns 16kk .. 16kk+15): the
// accumulator layout of two 16x8 blocks is the A layout of one 16x16.
template <typename T>
__device__ __forceinline__ void to_a(uint32_t (&pf)[kRows / 16][4],
                                     const float (&s)[kColBlocks][4]) {
#pragma unroll
  for (int j = 0; j < kColBlocks; ++j) {
    pf[j / 2][(j % 2) * 2] = pack_rn<T>(s[j][0], s[j][1]);
    pf[j / 2][(j % 2) * 2 + 1] = pack_rn<T>(s[j][2], s[j][3]);
  }
}

// acc[n] += P B for column block n (HS columns): P the warp's 16 x 64 (A fragments), B a
// [64][HS + 8] tile (row k of B is row k of the tile). 4 * HS / 8 mma.
template <typename T, int HS>
__device__ __forceinline__ void accumulate_times_tile(float (&acc)[HS / 8][4],
                                                      const uint32_t (&pf)[kRows / 16][4],
                                                      const T* b) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int kk = 0; kk < kRows / 16; ++kk) {
#pragma unroll
    for (int nn = 0; nn < HS / 16; ++nn) {
      uint32_t bf[4];  // bf[0..1]: column block 2nn, bf[2..3]: 2nn + 1
      ldmatrix_x4_trans(bf, b + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kLdTile<HS> +
                                nn * 16 + (lane / 16) * 8);
      mma_16816<T>(acc[2 * nn], pf[kk], bf);
      mma_16816<T>(acc[2 * nn + 1], pf[kk], bf + 2);
    }
  }
}

// Writes a warp's accumulators times mul[r] (rows gr, gr + 8) to rows row0 .. row0+15 of `dst`
// (row stride `stride`, HS columns), skipping rows at or past T, staged through `stage` (the
// warp's own [16][HS + 8] shared rows) so that global memory is written 16 bytes at a time.
template <typename T, int HS>
__device__ void store_rows(T* dst, int64_t stride, const float (&acc)[HS / 8][4],
                           const float (&mul)[2], T* stage, int row0, const Geo& g) {
  constexpr int ld = kLdTile<HS>;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int gr = lane / 4, tq = lane % 4;
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      store_f32(stage + (gr + (e / 2) * 8) * ld + n * 8 + tq * 2 + e % 2, acc[n][e] * mul[e / 2]);
    }
  }
  __syncwarp();
  if (g.vec) {
    constexpr int per_row = HS / 8;
    for (int e = lane; e < 16 * per_row; e += 32) {
      const int r = e / per_row;
      const int c = (e % per_row) * 8;
      if (row0 + r < g.T) {
        *reinterpret_cast<uint4*>(dst + (row0 + r) * stride + c) =
            *reinterpret_cast<const uint4*>(stage + r * ld + c);
      }
    }
  } else {
    for (int e = lane; e < 16 * HS; e += 32) {
      const int r = e / HS;
      const int c = e % HS;
      if (row0 + r < g.T) dst[(row0 + r) * stride + c] = stage[r * ld + c];
    }
  }
}

// D = dout . out of row `row` (0 past T), summed over the 4 lanes of a quad (lane tq takes
// columns tq * HS/4 .. in order, then two shuffles): one function wherever D is computed, so
// every kernel gets the same bits.
template <typename T, int HS>
__device__ float quad_delta(const T* dout, const T* out, int64_t stride, int row, const Geo& g) {
  const int tq = static_cast<int>(threadIdx.x) % 4;
  float part = 0.0f;
  if (row < g.T) {
    for (int d = tq * (HS / 4); d < (tq + 1) * (HS / 4); ++d) {
      part += load_f32(dout + row * stride + d) * load_f32(out + row * stride + d);
    }
  }
  part += __shfl_xor_sync(kAll, part, 1);
  return part + __shfl_xor_sync(kAll, part, 2);
}

// K and V rows row0 .. row0+63 of a block's key/value head into one stage of the pipeline: K at
// `stage`, V one tile after it (asynchronous where stage_rows is).
template <typename T, int HS>
__device__ void stage_kv(T* stage, const T* qkv, const Head& hd, int row0, const Geo& g) {
  stage_rows<T, HS>(stage, qkv + hd.k, hd.stride, row0, g);
  stage_rows<T, HS>(stage + kTileElems<HS>, qkv + hd.v, hd.stride, row0, g);
}

// A step of the two-stage pipeline: with the next tile's copies issued (`issued`), closes their
// group and waits for every group before it; on the last tile waits for everything. Then the
// block meets, so every thread's copies of the current tile are visible to all.
__device__ __forceinline__ void tile_ready(bool issued) {
  if (issued) {
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

template <typename K>
cudaError_t allow(K kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

inline Geo make_geo(const void* a, const void* b, const void* c, int64_t T, int64_t C, int64_t NH,
                    int64_t NKV) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int hs = static_cast<int>(C / NH);
  const int64_t width = C + 2 * NKV * hs;
  return Geo{static_cast<int>(T),
             static_cast<int>(C),
             static_cast<int>(NH),
             static_cast<int>(NKV),
             static_cast<int>(NH / NKV),
             static_cast<int>(width),
             1.0f / sqrtf(static_cast<float>(hs)),
             C % 8 == 0 && width % 8 == 0 && aligned(a) && aligned(b) && aligned(c)};
}

inline dim3 grid_tc(int64_t B, int64_t T, int64_t NH) {
  return dim3(static_cast<unsigned>((T + kRows - 1) / kRows), static_cast<unsigned>(NH),
              static_cast<unsigned>(B));
}

// Calls F::run<T, HS> for the 16-bit type and head size of a tensor-core case.
template <typename F, typename... Args>
cudaError_t dispatch_tc(ElemType t, int64_t hs, Args... args) {
  const bool half = t == ElemType::kF16;
  switch (hs) {
    case 32:
      return half ? F::template run<__half, 32>(args...)
                  : F::template run<__nv_bfloat16, 32>(args...);
    case 64:
      return half ? F::template run<__half, 64>(args...)
                  : F::template run<__nv_bfloat16, 64>(args...);
    default:
      return half ? F::template run<__half, 128>(args...)
                  : F::template run<__nv_bfloat16, 128>(args...);
  }
}

}  // namespace strata::gpu::cuda::attention_tc
