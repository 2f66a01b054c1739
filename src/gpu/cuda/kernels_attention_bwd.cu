// Causal self-attention's backward on tensor cores, for 16-bit storage and head sizes 32, 64 and
// 128 (the forward is in kernels_attention_fwd.cu, whose register tiles it shares through
// attention_tc.cuh; the scalar kernels for everything else are in kernels_attention.cu).
// Deterministic (no atomics), so split in two kernels as the scalar ones are:
//   dq:  a block per 64 query rows of a query head, 16 a warp; per key tile up to the diagonal
//        S = Q K^T, P = exp(S * scale - lse), dP = dO V^T, dS = P (dP - D), dQ += dS K. D =
//        dout . out per row, computed once here (quad_delta) and kept in the stream's scratch
//        ([B,NH,T] fp32, when it fits).
//   dkv: a block per 64 key rows of a key/value head, 16 a warp; for each query head of its
//        group in order, per query tile from the diagonal on: S^T = K Q^T, P^T, dP^T = V dO^T,
//        dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q; D read back from the scratch (or,
//        when it did not fit, computed again by quad_delta: the same bits).
// Everything a warp computes stays in registers (mma.sync m16n8k16, fp32 accumulators): the
// score and dP tiles, P and dS rounded to the storage type as A fragments (as FlashAttention
// rounds them), the dQ or dK and dV accumulators. The other side's tiles come in by 16-byte
// cp.async one tile ahead, two stages deep; B fragments through ldmatrix (.trans for the
// products whose B is a tile's rows). Scores are scaled after the product, in the base-2
// domain (scale * log2(e), lse * log2(e)).
// Work: 7 matmuls of 64 x 64 x HS per tile pair (dq 3, dkv 4) where FlashAttention-2 does 5 with
// atomic dQ sums: the price of bit-identical results run to run.
// Shared memory: 6 tiles of [64][HS + 8] 16-bit elements (dkv also 2 x 2 x 64 floats of lse and
// D): 104 KB at HS = 128, 55 KB at 64.
#include <cstdint>

#include "gpu/cuda/attention_tc.cuh"
#include "gpu/cuda/common.cuh"

namespace strata::gpu::cuda {
namespace {

using namespace attention_tc;  // NOLINT(google-build-using-namespace): the kernels' shared pieces

template <int HS>
constexpr size_t dq_bytes(size_t elem) {
  return 6 * kTileElems<HS> * elem;
}
template <int HS>
constexpr size_t dkv_bytes(size_t elem) {
  return 6 * kTileElems<HS> * elem + 2 * 2 * kRows * sizeof(float);
}

template <typename T, int HS>
__global__ void __launch_bounds__(kTcWarps * 32)
    attention_backward_dq_kernel(T* dqkv, const T* dout, const T* qkv, const T* out,
                                 const float* lse, float* delta, Geo g) {
  constexpr int ld = kLdTile<HS>;
  constexpr size_t tile = kTileElems<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  T* do_s = q_s + tile;
  T* kv_s = do_s + tile;  // stage s: K at kv_s + 2 * s * tile, V right after it
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int gr = lane / 4, tq = lane % 4;
  const Head hd = head_of_block<HS>(g);
  const int q0 = static_cast<int>(blockIdx.x) * kRows;
  const int qw = q0 + warp * 16;
  const bool active = qw < g.T;  // uniform over the warp
  const int tiles = q0 / kRows + 1;
  const float scale2 = g.scale * kLog2e;

  stage_rows<T, HS>(q_s, qkv + hd.q, hd.stride, q0, g);
  stage_rows<T, HS>(do_s, dout + hd.btc, g.C, q0, g);
  stage_kv<T, HS>(kv_s, qkv, hd, 0, g);
  cp_async_commit();

  float D[2], lse2[2];  // rows gr and gr + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = qw + gr + r * 8;
    D[r] = quad_delta<T, HS>(dout + hd.btc, out + hd.btc, g.C, row, g);
    if (delta != nullptr && tq == 0 && row < g.T) delta[hd.lse + row] = D[r];
    lse2[r] = row < g.T ? lse[hd.lse + row] * kLog2e : 0.0f;
  }
  float dq[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

  for (int t = 0; t < tiles; ++t) {
    const bool more = t + 1 < tiles;
    if (more) stage_kv<T, HS>(kv_s + ((t + 1) & 1) * 2 * tile, qkv, hd, (t + 1) * kRows, g);
    tile_ready(more);
    const T* k_s = kv_s + (t & 1) * 2 * tile;
    if (active) {
      uint32_t af[HS / 16][4];
      float s[kColBlocks][4], dp[kColBlocks][4];
      load_a<T, HS>(af, q_s + warp * 16 * ld);
      times_tile_t<T, HS>(s, af, k_s);  // S = Q K^T
      load_a<T, HS>(af, do_s + warp * 16 * ld);
      times_tile_t<T, HS>(dp, af, k_s + tile);  // dP = dO V^T
      const bool diagonal = t == tiles - 1;
#pragma unroll
      for (int j = 0; j < kColBlocks; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = qw + gr + (e / 2) * 8;
          const int key = t * kRows + j * 8 + tq * 2 + e % 2;
          const bool visible = row < g.T && !(diagonal && key > row);
          const float p = visible ? exp2f(s[j][e] * scale2 - lse2[e / 2]) : 0.0f;
          s[j][e] = p * (dp[j][e] - D[e / 2]);  // dS
        }
      }
      uint32_t dsf[kRows / 16][4];
      to_a<T>(dsf, s);
      accumulate_times_tile<T, HS>(dq, dsf, k_s);  // dQ += dS K
    }
    __syncthreads();
  }
  if (!active) return;
  const float mul[2] = {g.scale, g.scale};
  store_rows<T, HS>(dqkv + hd.q, hd.stride, dq, mul, q_s + warp * 16 * ld, qw, g);
}

template <typename T, int HS>
__global__ void __launch_bounds__(kTcWarps * 32)
    attention_backward_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const T* out,
                                  const float* lse, const float* delta, Geo g) {
  constexpr int ld = kLdTile<HS>;
  constexpr size_t tile = kTileElems<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* k_s = reinterpret_cast<T*>(smem);
  T* v_s = k_s + tile;
  T* qd_s = v_s + tile;  // stage s: Q at qd_s + 2 * s * tile, dO right after it
  float* stats = reinterpret_cast<float*>(qd_s + 4 * tile);  // stage s: lse2 [64], D [64]
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int gr = lane / 4, tq = lane % 4;
  const int b = static_cast<int>(blockIdx.z);
  const int kvh = static_cast<int>(blockIdx.y);  // the key/value head
  const Head kv = head_at<HS>(g, b, kvh * g.group);
  const int kb0 = static_cast<int>(blockIdx.x) * kRows;
  const int kw = kb0 + warp * 16;
  const bool active = kw < g.T;                          // uniform over the warp
  const int per_head = (g.T - kb0 + kRows - 1) / kRows;  // query tiles from the diagonal on
  const int items = per_head * g.group;
  const float scale2 = g.scale * kLog2e;

  // Item i: query head kvh * group + i / per_head, query tile kb0 + (i % per_head) * 64.
  const auto stage_item = [&](int i) {
    const Head hd = head_at<HS>(g, b, kvh * g.group + i / per_head);
    const int qs = kb0 + (i % per_head) * kRows;
    T* q_dst = qd_s + (i & 1) * 2 * tile;
    stage_rows<T, HS>(q_dst, qkv + hd.q, hd.stride, qs, g);
    stage_rows<T, HS>(q_dst + tile, dout + hd.btc, g.C, qs, g);
    float* st = stats + (i & 1) * 2 * kRows;
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // warp w: queries 16w + gr, 16w + gr + 8 of the tile
      const int tr = warp * 16 + gr + r * 8;
      const int qi = qs + tr;
      const float D = delta == nullptr ? quad_delta<T, HS>(dout + hd.btc, out + hd.btc, g.C, qi, g)
                      : qi < g.T       ? delta[hd.lse + qi]
                                       : 0.0f;
      if (tq == 0) {
        st[tr] = qi < g.T ? lse[hd.lse + qi] * kLog2e : 0.0f;
        st[kRows + tr] = D;
      }
    }
  };

  stage_rows<T, HS>(k_s, qkv + kv.k, kv.stride, kb0, g);
  stage_rows<T, HS>(v_s, qkv + kv.v, kv.stride, kb0, g);
  stage_item(0);
  cp_async_commit();

  float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) {
    dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.0f;
    dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.0f;
  }
  for (int i = 0; i < items; ++i) {
    const bool more = i + 1 < items;
    if (more) stage_item(i + 1);
    tile_ready(more);
    const int qs = kb0 + (i % per_head) * kRows;
    const T* q_t = qd_s + (i & 1) * 2 * tile;
    const T* do_t = q_t + tile;
    const float* lse2 = stats + (i & 1) * 2 * kRows;
    const float* d_t = lse2 + kRows;
    if (active && qs + kRows - 1 >= kw) {  // uniform over the warp: some query sees its keys
      uint32_t af[HS / 16][4];
      float s[kColBlocks][4], dp[kColBlocks][4];
      load_a<T, HS>(af, k_s + warp * 16 * ld);
      times_tile_t<T, HS>(s, af, q_t);  // S^T = K Q^T
      load_a<T, HS>(af, v_s + warp * 16 * ld);
      times_tile_t<T, HS>(dp, af, do_t);  // dP^T = V dO^T
#pragma unroll
      for (int j = 0; j < kColBlocks; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kw + gr + (e / 2) * 8;
          const int c = j * 8 + tq * 2 + e % 2;  // the query's row in the tile
          const int qi = qs + c;
          const bool visible = qi >= key && qi < g.T;
          const float p = visible ? exp2f(s[j][e] * scale2 - lse2[c]) : 0.0f;
          s[j][e] = p;
          dp[j][e] = p * (dp[j][e] - d_t[c]);  // dS^T
        }
      }
      uint32_t pf[kRows / 16][4];
      to_a<T>(pf, s);
      accumulate_times_tile<T, HS>(dv, pf, do_t);  // dV += P^T dO
      to_a<T>(pf, dp);
      accumulate_times_tile<T, HS>(dk, pf, q_t);  // dK += dS^T Q
    }
    __syncthreads();
  }
  if (!active) return;
  const float scale[2] = {g.scale, g.scale};
  const float one[2] = {1.0f, 1.0f};
  // Staged in the warp's own K and V rows (only this warp read them).
  store_rows<T, HS>(dqkv + kv.k, kv.stride, dk, scale, k_s + warp * 16 * ld, kw, g);
  store_rows<T, HS>(dqkv + kv.v, kv.stride, dv, one, v_s + warp * 16 * ld, kw, g);
}

template <typename T, int HS>
cudaError_t backward_tc(cudaStream_t s, void* dqkv, const void* dout, const void* qkv,
                        const void* out, const float* lse, int64_t B, int64_t T_, int64_t C,
                        int64_t NH, int64_t NKV, float* scratch) {
  const Geo g = make_geo(qkv, dout, dqkv, T_, C, NH, NKV);
  // D per query row and head, [B,NH,T] like lse, where the scratch holds it (no scratch: D is
  // computed where it is used).
  float* delta = scratch != nullptr && B * NH * T_ <= kStreamScratchFloats ? scratch : nullptr;
  const size_t dq_b = dq_bytes<HS>(sizeof(T));
  const size_t dkv_b = dkv_bytes<HS>(sizeof(T));
  auto* dq = attention_backward_dq_kernel<T, HS>;
  auto* dkv = attention_backward_dkv_kernel<T, HS>;
  cudaError_t err = allow(dq, dq_b);
  if (err == cudaSuccess) err = allow(dkv, dkv_b);
  if (err != cudaSuccess) return err;
  dq<<<grid_tc(B, T_, NH), kTcWarps * 32, dq_b, s>>>(
      static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv),
      static_cast<const T*>(out), lse, delta, g);
  err = launch_result();
  if (err != cudaSuccess) return err;
  dkv<<<grid_tc(B, T_, NKV), kTcWarps * 32, dkv_b, s>>>(
      static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv),
      static_cast<const T*>(out), lse, delta, g);
  return launch_result();
}

struct BackwardTc {
  template <typename T, int HS, typename... Args>
  static cudaError_t run(Args... args) {
    return backward_tc<T, HS>(args...);
  }
};

}  // namespace

cudaError_t launch_attention_backward_tc(cudaStream_t stream, void* dqkv, const void* dout,
                                         const void* qkv, const void* out, const float* lse,
                                         int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                         ElemType t, float* scratch) {
  return dispatch_tc<BackwardTc>(t, C / NH, stream, dqkv, dout, qkv, out, lse, B, T, C, NH, NKV,
                                 scratch);
}

}  // namespace strata::gpu::cuda
