// Causal self-attention on tensor cores (wmma: 16x16x16 tiles of fp16/bf16, fp32 accumulation)
// for 16-bit storage and head sizes 32, 64 and 128; kernels_attention.cu has the scalar kernels
// for everything else (and for everything when STRATA_CUDA_ATTENTION=scalar). FlashAttention-2's
// structure: no T x T matrix in memory, a block of 4 warps owns 64 rows, 16 per warp, and walks
// tiles of 64 of the other side.
//
// Forward: per key tile a warp computes S = Q K^T (fp32) into shared memory, updates its rows'
// running max m and sum l there (two lanes per row), writes P = exp(S - m) in the storage type,
// rescales its fp32 output rows and adds P V. lse = m + log(l).
// Backward, deterministic (no atomics), split as in the scalar kernels:
//   dq:  a block per 64 query rows; per key tile S, P = exp(S - lse), dP = dO V^T,
//        dS = P (dP - D), dQ += dS K; D = dout . out per row, computed once here and kept in
//        the stream's scratch ([B,NH,T] fp32, when it fits); dQ stays in registers.
//   dkv: a block per 64 key rows of a key/value head; for each query head of its group in order,
//        per query tile S^T = K Q^T, P^T, dP^T = V dO^T, dS^T = P^T (dP^T - D), dV += P^T dO,
//        dK += dS^T Q; D read back from the scratch (or, when it did not fit, computed again
//        from dout and out: the same operations, the same bits).
// Grouped-query attention: query head h reads key/value head h / (NH / NKV) (kernels.h).
// P and dS are rounded to the storage type for their products, as FlashAttention does; scores
// are scaled by 1/sqrt(HS) in fp32 after the product.
#include <mma.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "gpu/cuda/common.cuh"

namespace strata::gpu::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kRows = 64;        // rows a block owns, and rows of the other side per tile
constexpr int kTcWarps = 4;      // 16 rows each
constexpr int kLdS = kRows + 4;  // fp32 score rows in shared memory
constexpr int kLdP = kRows + 8;  // 16-bit probability rows
constexpr unsigned kAll = 0xffffffffu;

struct Geo {
  int T, C, NH, NKV;
  int group;  // NH / NKV
  int width;  // qkv row: C + 2 * NKV * HS
  float scale;
  bool vec;  // 16-byte copies are aligned (C and width % 8 == 0, 16-byte aligned tensors)
};

template <int HS>
struct Layout {
  static constexpr int ldk = HS + 8;                   // 16-bit rows of a [64][HS] tile
  static constexpr int ldo = HS + 4;                   // fp32 rows of a warp's [16][HS] output
  static constexpr size_t tile = size_t{kRows} * ldk;  // elements of one 16-bit tile
  static constexpr size_t warp_s = size_t{16} * kLdS;  // floats of a warp's scores
  static constexpr size_t warp_p = size_t{16} * kLdP;  // elements of a warp's 16-bit P
  static constexpr size_t warp_o = size_t{16} * ldo;   // floats of a warp's output rows
  // Bytes: `tiles` 16-bit tiles, then per warp `s` score buffers, one output buffer (if `o`) and
  // `p` 16-bit buffers, then 2 * 64 floats of row statistics. Every part is 128-byte aligned.
  static constexpr size_t bytes(int tiles, int s, bool o, int p) {
    return 2 * tile * tiles + kTcWarps * (4 * (warp_s * s + (o ? warp_o : 0)) + 2 * warp_p * p) +
           2 * kRows * 4;
  }
};

using wmma::accumulator;
using wmma::col_major;
using wmma::matrix_a;
using wmma::matrix_b;
using wmma::row_major;
using Acc = wmma::fragment<accumulator, 16, 16, 16, float>;
template <typename T>
using FragA = wmma::fragment<matrix_a, 16, 16, 16, T, row_major>;
template <typename T, typename L>
using FragB = wmma::fragment<matrix_b, 16, 16, 16, T, L>;

// Copies rows row0 .. row0+63 of a [T, stride] tensor (from `base`, HS columns) into a
// [64][ldk] tile; rows at or past T are zero. Called by the whole block.
template <typename T, int HS>
__device__ void load_rows(T* tile, const T* base, int64_t stride, int row0, const Geo& g) {
  constexpr int ldk = Layout<HS>::ldk;
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

// out[16][64] (ld kLdS, fp32) = A[16][HS] (ld lda) times B[64][HS]^T (ld ldb), one warp.
template <typename T, int HS>
__device__ void rows_times_tile_t(float* out, const T* a, int lda, const T* b, int ldb) {
  for (int n = 0; n < kRows / 16; ++n) {
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < HS / 16; ++kk) {
      FragA<T> fa;
      FragB<T, col_major> fb;
      wmma::load_matrix_sync(fa, a + kk * 16, lda);
      wmma::load_matrix_sync(fb, b + n * 16 * ldb + kk * 16, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, kLdS, wmma::mem_row_major);
  }
}

// acc[n] += P[16][64] (ld kLdP) times B[64][HS] (ld ldb) for the HS/16 column blocks n.
template <typename T, int HS>
__device__ void accumulate_p_times_tile(Acc* acc, const T* p, const T* b, int ldb) {
  for (int kk = 0; kk < kRows / 16; ++kk) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, p + kk * 16, kLdP);
    for (int n = 0; n < HS / 16; ++n) {
      FragB<T, row_major> fb;
      wmma::load_matrix_sync(fb, b + kk * 16 * ldb + n * 16, ldb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Lane (r, half) of a warp handles row r (0..15) and columns half*32 .. half*32+31 of a tile.
struct LaneRow {
  int r, half;
};
__device__ __forceinline__ LaneRow lane_row() {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  return LaneRow{lane / 2, lane % 2};
}

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

// Writes a warp's 16 fp32 rows (ld ldo, times `mul`) to rows row0.. of `dst` (row stride
// `stride`, HS columns), skipping rows at or past T. Each lane pair writes its row.
template <typename T, int HS>
__device__ void write_rows(T* dst, int64_t stride, const float* rows, float mul, int row0,
                           const Geo& g) {
  const LaneRow lr = lane_row();
  const int row = row0 + lr.r;
  if (row >= g.T) return;
  for (int d = lr.half * (HS / 2); d < (lr.half + 1) * (HS / 2); ++d) {
    store_f32(dst + row * stride + d, rows[lr.r * Layout<HS>::ldo + d] * mul);
  }
}

// Stores each accumulator block to the warp's fp32 rows (ld ldo).
template <int HS>
__device__ void store_blocks(float* rows, const Acc* acc) {
  for (int n = 0; n < HS / 16; ++n) {
    wmma::store_matrix_sync(rows + n * 16, acc[n], Layout<HS>::ldo, wmma::mem_row_major);
  }
}

// dot(dout row, out row) of row `row` (past T: 0), summed over the lane pair.
template <typename T, int HS>
__device__ float row_delta(const T* dout, const T* out, int64_t stride, int row, const Geo& g) {
  const LaneRow lr = lane_row();
  float part = 0.0f;
  if (row < g.T) {
    for (int d = lr.half * (HS / 2); d < (lr.half + 1) * (HS / 2); ++d) {
      part += load_f32(dout + row * stride + d) * load_f32(out + row * stride + d);
    }
  }
  return part + __shfl_xor_sync(kAll, part, 1);
}

template <typename T, int HS>
__global__ void __launch_bounds__(kTcWarps * 32)
    attention_forward_tc_kernel(T* out, float* lse, const T* qkv, Geo g) {
  using L = Layout<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  T* k_s = q_s + L::tile;
  T* v_s = k_s + L::tile;
  float* s_all = reinterpret_cast<float*>(v_s + L::tile);
  float* o_all = s_all + kTcWarps * L::warp_s;
  T* p_all = reinterpret_cast<T*>(o_all + kTcWarps * L::warp_o);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const Head hd = head_of_block<HS>(g);
  const int q0 = static_cast<int>(blockIdx.x) * kRows;
  const int qw = q0 + warp * 16;
  const int64_t stride = hd.stride;
  float* s_w = s_all + warp * L::warp_s;
  float* o_w = o_all + warp * L::warp_o;
  T* p_w = p_all + warp * L::warp_p;
  load_rows<T, HS>(q_s, qkv + hd.q, stride, q0, g);
  for (size_t e = lane; e < L::warp_o; e += 32) o_w[e] = 0.0f;
  const LaneRow lr = lane_row();
  const int qi = qw + lr.r;
  float m = -INFINITY;
  float l = 0.0f;
  const int last = min(q0 + kRows, g.T) - 1;
  for (int k0 = 0; k0 <= last; k0 += kRows) {
    __syncthreads();  // the previous tiles are consumed (and Q is loaded)
    load_rows<T, HS>(k_s, qkv + hd.k, stride, k0, g);
    load_rows<T, HS>(v_s, qkv + hd.v, stride, k0, g);
    __syncthreads();
    if (qw >= g.T || k0 > qw + 15) continue;  // uniform over the warp: nothing visible
    rows_times_tile_t<T, HS>(s_w, q_s + warp * 16 * L::ldk, L::ldk, k_s, L::ldk);
    __syncwarp();
    float* srow = s_w + lr.r * kLdS + lr.half * 32;
    float mx = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      const int key = k0 + lr.half * 32 + c;
      const float sc = key <= qi && key < g.T ? srow[c] * g.scale : -INFINITY;
      srow[c] = sc;
      mx = fmaxf(mx, sc);
    }
    mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, 1));
    const float m_new = fmaxf(m, mx);
    const float corr = m_new == -INFINITY ? 1.0f : expf(m - m_new);
    float sum = 0.0f;
    T* prow = p_w + lr.r * kLdP + lr.half * 32;
    for (int c = 0; c < 32; ++c) {
      const float p = srow[c] == -INFINITY ? 0.0f : expf(srow[c] - m_new);
      sum += p;
      store_f32(prow + c, p);
    }
    sum += __shfl_xor_sync(kAll, sum, 1);
    l = l * corr + sum;
    m = m_new;
    for (int d = lr.half * (HS / 2); d < (lr.half + 1) * (HS / 2); ++d) {
      o_w[lr.r * L::ldo + d] *= corr;
    }
    __syncwarp();
    Acc acc[HS / 16];
    for (int n = 0; n < HS / 16; ++n) {
      wmma::load_matrix_sync(acc[n], o_w + n * 16, L::ldo, wmma::mem_row_major);
    }
    accumulate_p_times_tile<T, HS>(acc, p_w, v_s, L::ldk);
    store_blocks<HS>(o_w, acc);
    __syncwarp();
  }
  if (qi >= g.T) return;  // rows past T are not written
  write_rows<T, HS>(out + hd.btc, g.C, o_w, 1.0f / l, qw, g);
  if (lr.half == 0) lse[hd.lse + qi] = m + logf(l);
}

template <typename T, int HS>
__global__ void __launch_bounds__(kTcWarps * 32)
    attention_backward_dq_tc_kernel(T* dqkv, const T* dout, const T* qkv, const T* out,
                                    const float* lse, float* delta, Geo g) {
  using L = Layout<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  T* do_s = q_s + L::tile;
  T* k_s = do_s + L::tile;
  T* v_s = k_s + L::tile;
  float* s_all = reinterpret_cast<float*>(v_s + L::tile);  // per warp: P, then dP
  float* o_all = s_all + kTcWarps * 2 * L::warp_s;         // per warp: dQ staging
  T* ds_all = reinterpret_cast<T*>(o_all + kTcWarps * L::warp_o);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const Head hd = head_of_block<HS>(g);
  const int q0 = static_cast<int>(blockIdx.x) * kRows;
  const int qw = q0 + warp * 16;
  const int64_t stride = hd.stride;
  const int64_t btc = hd.btc;
  float* p_w = s_all + warp * 2 * L::warp_s;
  float* dp_w = p_w + L::warp_s;
  float* o_w = o_all + warp * L::warp_o;
  T* ds_w = ds_all + warp * L::warp_p;
  load_rows<T, HS>(q_s, qkv + hd.q, stride, q0, g);
  load_rows<T, HS>(do_s, dout + btc, g.C, q0, g);
  const LaneRow lr = lane_row();
  const int qi = qw + lr.r;
  const float D = row_delta<T, HS>(dout + btc, out + btc, g.C, qi, g);
  if (delta != nullptr && lr.half == 0 && qi < g.T) delta[hd.lse + qi] = D;
  const float lse_i = qi < g.T ? lse[hd.lse + qi] : 0.0f;
  Acc dq[HS / 16];
  for (int n = 0; n < HS / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);
  const int last = min(q0 + kRows, g.T) - 1;
  for (int k0 = 0; k0 <= last; k0 += kRows) {
    __syncthreads();
    load_rows<T, HS>(k_s, qkv + hd.k, stride, k0, g);
    load_rows<T, HS>(v_s, qkv + hd.v, stride, k0, g);
    __syncthreads();
    if (qw >= g.T || k0 > qw + 15) continue;  // uniform over the warp
    rows_times_tile_t<T, HS>(p_w, q_s + warp * 16 * L::ldk, L::ldk, k_s, L::ldk);
    rows_times_tile_t<T, HS>(dp_w, do_s + warp * 16 * L::ldk, L::ldk, v_s, L::ldk);
    __syncwarp();
    const float* prow = p_w + lr.r * kLdS + lr.half * 32;
    const float* dprow = dp_w + lr.r * kLdS + lr.half * 32;
    T* dsrow = ds_w + lr.r * kLdP + lr.half * 32;
    for (int c = 0; c < 32; ++c) {
      const int key = k0 + lr.half * 32 + c;
      const bool visible = key <= qi && key < g.T && qi < g.T;
      const float p = visible ? expf(prow[c] * g.scale - lse_i) : 0.0f;
      store_f32(dsrow + c, p * (dprow[c] - D));
    }
    __syncwarp();
    accumulate_p_times_tile<T, HS>(dq, ds_w, k_s, L::ldk);
    __syncwarp();
  }
  if (qw >= g.T) return;
  store_blocks<HS>(o_w, dq);
  __syncwarp();
  write_rows<T, HS>(dqkv + hd.q, stride, o_w, g.scale, qw, g);
}

template <typename T, int HS>
__global__ void __launch_bounds__(kTcWarps * 32)
    attention_backward_dkv_tc_kernel(T* dqkv, const T* dout, const T* qkv, const T* out,
                                     const float* lse, const float* delta, Geo g) {
  using L = Layout<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* k_s = reinterpret_cast<T*>(smem);
  T* v_s = k_s + L::tile;
  T* q_s = v_s + L::tile;
  T* do_s = q_s + L::tile;
  float* s_all = reinterpret_cast<float*>(do_s + L::tile);        // per warp: S^T then dP^T
  float* o_all = s_all + kTcWarps * 2 * L::warp_s;                // per warp: dK / dV staging
  T* p_all = reinterpret_cast<T*>(o_all + kTcWarps * L::warp_o);  // per warp: P^T, dS^T
  float* d_s = reinterpret_cast<float*>(p_all + kTcWarps * 2 * L::warp_p);  // [64]
  float* lse_s = d_s + kRows;                                               // [64]
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int b = static_cast<int>(blockIdx.z);
  const int kvh = static_cast<int>(blockIdx.y);  // the key/value head
  const Head kv = head_at<HS>(g, b, kvh * g.group);
  const int kb0 = static_cast<int>(blockIdx.x) * kRows;
  const int kw = kb0 + warp * 16;
  const int64_t stride = kv.stride;
  float* st_w = s_all + warp * 2 * L::warp_s;
  float* dpt_w = st_w + L::warp_s;
  float* o_w = o_all + warp * L::warp_o;
  T* pt_w = p_all + warp * 2 * L::warp_p;
  T* dst_w = pt_w + L::warp_p;
  load_rows<T, HS>(k_s, qkv + kv.k, stride, kb0, g);
  load_rows<T, HS>(v_s, qkv + kv.v, stride, kb0, g);
  const LaneRow lr = lane_row();
  const int key = kw + lr.r;
  Acc dk[HS / 16];
  Acc dv[HS / 16];
  for (int n = 0; n < HS / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  for (int h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {  // the group's query heads
    const Head hd = head_at<HS>(g, b, h);
    const int64_t btc = hd.btc;
    for (int qs = kb0; qs < g.T; qs += kRows) {
      __syncthreads();
      load_rows<T, HS>(q_s, qkv + hd.q, stride, qs, g);
      load_rows<T, HS>(do_s, dout + btc, g.C, qs, g);
      {  // D and lse of the tile's queries: warp w takes queries 16w .. 16w+15, a lane pair each
        const int t = warp * 16 + lr.r;
        const int qi = qs + t;
        const float D = delta == nullptr ? row_delta<T, HS>(dout + btc, out + btc, g.C, qi, g)
                        : qi < g.T       ? delta[hd.lse + qi]
                                         : 0.0f;
        if (lr.half == 0) {
          d_s[t] = D;
          lse_s[t] = qi < g.T ? lse[hd.lse + qi] : 0.0f;
        }
      }
      __syncthreads();
      if (kw >= g.T || qs + kRows - 1 < kw) continue;  // uniform over the warp
      rows_times_tile_t<T, HS>(st_w, k_s + warp * 16 * L::ldk, L::ldk, q_s, L::ldk);
      rows_times_tile_t<T, HS>(dpt_w, v_s + warp * 16 * L::ldk, L::ldk, do_s, L::ldk);
      __syncwarp();
      const float* strow = st_w + lr.r * kLdS + lr.half * 32;
      const float* dptrow = dpt_w + lr.r * kLdS + lr.half * 32;
      T* ptrow = pt_w + lr.r * kLdP + lr.half * 32;
      T* dstrow = dst_w + lr.r * kLdP + lr.half * 32;
      for (int c = 0; c < 32; ++c) {
        const int t = lr.half * 32 + c;
        const int qi = qs + t;
        const bool visible = qi >= key && qi < g.T && key < g.T;
        const float p = visible ? expf(strow[c] * g.scale - lse_s[t]) : 0.0f;
        store_f32(ptrow + c, p);
        store_f32(dstrow + c, p * (dptrow[c] - d_s[t]));
      }
      __syncwarp();
      accumulate_p_times_tile<T, HS>(dv, pt_w, do_s, L::ldk);
      accumulate_p_times_tile<T, HS>(dk, dst_w, q_s, L::ldk);
      __syncwarp();
    }
  }
  if (kw >= g.T) return;
  store_blocks<HS>(o_w, dk);
  __syncwarp();
  write_rows<T, HS>(dqkv + kv.k, stride, o_w, g.scale, kw, g);
  __syncwarp();
  store_blocks<HS>(o_w, dv);
  __syncwarp();
  write_rows<T, HS>(dqkv + kv.v, stride, o_w, 1.0f, kw, g);
}

template <typename K>
cudaError_t allow(K kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

Geo make_geo(const void* a, const void* b, const void* c, int64_t T, int64_t C, int64_t NH,
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

dim3 grid_tc(int64_t B, int64_t T, int64_t NH) {
  return dim3(static_cast<unsigned>((T + kRows - 1) / kRows), static_cast<unsigned>(NH),
              static_cast<unsigned>(B));
}

template <typename T, int HS>
cudaError_t forward_tc(cudaStream_t s, void* out, float* lse, const void* qkv, int64_t B,
                       int64_t T_, int64_t C, int64_t NH, int64_t NKV) {
  const Geo g = make_geo(qkv, out, qkv, T_, C, NH, NKV);
  const size_t bytes = Layout<HS>::bytes(3, 1, true, 1);
  auto* kernel = attention_forward_tc_kernel<T, HS>;
  const cudaError_t err = allow(kernel, bytes);
  if (err != cudaSuccess) return err;
  kernel<<<grid_tc(B, T_, NH), kTcWarps * 32, bytes, s>>>(static_cast<T*>(out), lse,
                                                          static_cast<const T*>(qkv), g);
  return launch_result();
}

template <typename T, int HS>
cudaError_t backward_tc(cudaStream_t s, void* dqkv, const void* dout, const void* qkv,
                        const void* out, const float* lse, int64_t B, int64_t T_, int64_t C,
                        int64_t NH, int64_t NKV, float* scratch) {
  const Geo g = make_geo(qkv, dout, dqkv, T_, C, NH, NKV);
  // D per query row and head, [B,NH,T] like lse, where the scratch holds it.
  float* delta = B * NH * T_ <= kStreamScratchFloats ? scratch : nullptr;
  const size_t dq_bytes = Layout<HS>::bytes(4, 2, true, 1);
  const size_t dkv_bytes = Layout<HS>::bytes(4, 2, true, 2);
  auto* dq = attention_backward_dq_tc_kernel<T, HS>;
  auto* dkv = attention_backward_dkv_tc_kernel<T, HS>;
  cudaError_t err = allow(dq, dq_bytes);
  if (err == cudaSuccess) err = allow(dkv, dkv_bytes);
  if (err != cudaSuccess) return err;
  dq<<<grid_tc(B, T_, NH), kTcWarps * 32, dq_bytes, s>>>(
      static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv),
      static_cast<const T*>(out), lse, delta, g);
  err = launch_result();
  if (err != cudaSuccess) return err;
  dkv<<<grid_tc(B, T_, NKV), kTcWarps * 32, dkv_bytes, s>>>(
      static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv),
      static_cast<const T*>(out), lse, delta, g);
  return launch_result();
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

struct ForwardTc {
  template <typename T, int HS, typename... Args>
  static cudaError_t run(Args... args) {
    return forward_tc<T, HS>(args...);
  }
};
struct BackwardTc {
  template <typename T, int HS, typename... Args>
  static cudaError_t run(Args... args) {
    return backward_tc<T, HS>(args...);
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
  return dispatch_tc<ForwardTc>(t, C / NH, stream, out, lse, qkv, B, T, C, NH, NKV);
}

cudaError_t launch_attention_backward_tc(cudaStream_t stream, void* dqkv, const void* dout,
                                         const void* qkv, const void* out, const float* lse,
                                         int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                         ElemType t, float* scratch) {
  return dispatch_tc<BackwardTc>(t, C / NH, stream, dqkv, dout, qkv, out, lse, B, T, C, NH, NKV,
                                 scratch);
}

}  // namespace strata::gpu::cuda
