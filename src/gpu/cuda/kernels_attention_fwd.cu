// Causal self-attention's forward on tensor cores with FlashAttention-2's structure, for 16-bit
// storage and head sizes 32, 64 and 128 (the backward is in kernels_attention_bwd.cu, the scalar
// kernels for everything else in kernels_attention.cu).
//
// A block of 4 warps owns 64 query rows of one head, 16 a warp, and walks the key tiles of 64
// up to its diagonal. Everything a warp computes stays in its registers (warp_mma.cuh: mma.sync
// m16n8k16, fp32 accumulation): its Q rows as A fragments (loaded once), the scores S = Q K^T of
// a tile (8 accumulators of 16x8), the probabilities P, which are S's accumulators rounded to
// the storage type and reused as A fragments in place (the accumulator layout of two 16x8 blocks
// is the A layout of one 16x16), and the output O (HS/8 accumulators). Online softmax per row,
// in the base-2 domain (scores times scale * log2(e), exp2): the row's 16 values a lane holds
// and a shuffle over the 4 lanes that share the row; the sum l is kept per lane and added over
// the 4 lanes at the end. Only the diagonal tile is masked (keys past a row; keys past T only
// ever follow rows past T, which are not written).
// Memory: Q, then K and V in two stages in shared memory ([64][HS + 8] each: ldmatrix reads 8
// rows in 8 different bank groups), filled by 16-byte cp.async copies one tile ahead: the copy
// of tile t + 1 runs while tile t is computed. K fragments come through ldmatrix, V's through
// ldmatrix.trans. The output is staged through the warp's own Q rows and written 16 bytes at a
// time. Unaligned tensors (Geo::vec false) are copied synchronously, element by element.
// Work per block-tile: 4 * 64 * 64 * HS FLOPs (S and P V), 2 * 64 * HS * 2 bytes read from
// global memory (K and V tiles; Q and O once per block), 64 * 64 exponentials.
// Shared memory: 5 * 64 * (HS + 8) * 2 bytes (87 KB at HS = 128, 46 KB at 64): two blocks a
// multiprocessor at HS = 128 on sm_90.
// lse = (m + log2(l)) * ln(2), natural base as the backward reads it.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "gpu/cuda/attention_tc.cuh"
#include "gpu/cuda/common.cuh"

namespace strata::gpu::cuda {
namespace {

using namespace attention_tc;  // NOLINT(google-build-using-namespace): the kernels' shared pieces

constexpr float kLn2 = 0.6931471805599453f;

template <int HS>
constexpr size_t forward_bytes(size_t elem) {
  return 5 * kTileElems<HS> * elem;
}

template <typename T, int HS>
__global__ void __launch_bounds__(kTcWarps * 32)
    attention_forward_fa2_kernel(T* out, float* lse, const T* qkv, Geo g) {
  constexpr int ld = kLdTile<HS>;
  constexpr size_t tile = kTileElems<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  T* kv_s = q_s + tile;  // stage s: K at kv_s + 2 * s * tile, V right after it
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int gr = lane / 4;  // the lane's rows gr and gr + 8 of the warp's 16
  const int tq = lane % 4;  // and its columns 2 tq, 2 tq + 1 of each 8-column block
  const Head hd = head_of_block<HS>(g);
  const int q0 = static_cast<int>(blockIdx.x) * kRows;
  const int qw = q0 + warp * 16;
  const bool active = qw < g.T;  // uniform over the warp
  const int tiles = q0 / kRows + 1;
  const float scale2 = g.scale * kLog2e;

  stage_rows<T, HS>(q_s, qkv + hd.q, hd.stride, q0, g);
  stage_kv<T, HS>(kv_s, qkv, hd, 0, g);
  cp_async_commit();

  uint32_t qf[HS / 16][4];
  float o[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};

  for (int t = 0; t < tiles; ++t) {
    const bool more = t + 1 < tiles;
    if (more) stage_kv<T, HS>(kv_s + ((t + 1) & 1) * 2 * tile, qkv, hd, (t + 1) * kRows, g);
    tile_ready(more);  // tile t (and Q) have landed; t + 1 is on its way
    const T* k_s = kv_s + (t & 1) * 2 * tile;
    if (active) {
      if (t == 0) load_a<T, HS>(qf, q_s + warp * 16 * ld);
      float s[kColBlocks][4];  // S = Q K^T: block j holds keys 8j .. 8j+7 of the tile
      times_tile_t<T, HS>(s, qf, k_s);
      const bool diagonal = t == tiles - 1;
      float mx[2] = {m[0], m[1]};
#pragma unroll
      for (int j = 0; j < kColBlocks; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = qw + gr + (e / 2) * 8;
          const int key = t * kRows + j * 8 + tq * 2 + e % 2;
          const float v = diagonal && key > row ? -INFINITY : s[j][e] * scale2;
          s[j][e] = v;
          mx[e / 2] = fmaxf(mx[e / 2], v);
        }
      }
      float corr[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(kAll, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(kAll, mx[r], 2));
        corr[r] = exp2f(m[r] - mx[r]);  // a row's maximum is finite: key 0 <= every row
        m[r] = mx[r];
        l[r] *= corr[r];
      }
#pragma unroll
      for (int j = 0; j < kColBlocks; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[j][e] = exp2f(s[j][e] - m[e / 2]);
          l[e / 2] += s[j][e];
        }
      }
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        o[n][0] *= corr[0];
        o[n][1] *= corr[0];
        o[n][2] *= corr[1];
        o[n][3] *= corr[1];
      }
      uint32_t pf[kRows / 16][4];  // P, rounded to T
      to_a<T>(pf, s);
      accumulate_times_tile<T, HS>(o, pf, k_s + tile);  // O += P V
    }
    __syncthreads();  // stage t & 1 is consumed before tile t + 2 is copied into it
  }
  if (!active) return;
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(kAll, l[r], 1);
    l[r] += __shfl_xor_sync(kAll, l[r], 2);
    inv[r] = 1.0f / l[r];
  }
  // O / l, staged in the warp's own Q rows (only this warp read them).
  store_rows<T, HS>(out + hd.btc, g.C, o, inv, q_s + warp * 16 * ld, qw, g);
  if (tq == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = qw + gr + r * 8;
      if (row < g.T) lse[hd.lse + row] = (m[r] + log2f(l[r])) * kLn2;
    }
  }
}

template <typename T, int HS>
cudaError_t forward_fa2(cudaStream_t s, void* out, float* lse, const void* qkv, int64_t B,
                        int64_t T_, int64_t C, int64_t NH, int64_t NKV) {
  const Geo g = make_geo(qkv, out, qkv, T_, C, NH, NKV);
  const size_t bytes = forward_bytes<HS>(sizeof(T));
  auto* kernel = attention_forward_fa2_kernel<T, HS>;
  const cudaError_t err = allow(kernel, bytes);
  if (err != cudaSuccess) return err;
  kernel<<<grid_tc(B, T_, NH), kTcWarps * 32, bytes, s>>>(static_cast<T*>(out), lse,
                                                          static_cast<const T*>(qkv), g);
  return launch_result();
}

struct ForwardFa2 {
  template <typename T, int HS, typename... Args>
  static cudaError_t run(Args... args) {
    return forward_fa2<T, HS>(args...);
  }
};

}  // namespace

bool attention_uses_tensor_cores(int64_t C, int64_t NH, ElemType t) {
  const int64_t hs = C / NH;
  if (t == ElemType::kF32 || (hs != 32 && hs != 64 && hs != 128)) return false;
  const char* choice = std::getenv("STRATA_CUDA_ATTENTION");
  return choice == nullptr || std::strcmp(choice, "scalar") != 0;
}

cudaError_t launch_attention_forward_tc(cudaStream_t stream, void* out, float* lse, const void* qkv,
                                        int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                        ElemType t) {
  return dispatch_tc<ForwardFa2>(t, C / NH, stream, out, lse, qkv, B, T, C, NH, NKV);
}

}  // namespace strata::gpu::cuda
