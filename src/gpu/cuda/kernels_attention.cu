// Causal self-attention, flash-style (no T x T matrix in memory), fp32 softmax, on CUDA cores:
// fp32 storage and head sizes the tensor-core kernels (kernels_attention_fwd.cu, _bwd.cu) do not
// take. qkv [B, T, C + 2*NKV*HS] holds q (NH heads) | k (NKV heads) | v (NKV heads); query head h
// uses key/value head h / (NH / NKV) (grouped-query attention; NKV = NH: multi-head).
//
// Forward: one block per (8 query rows, head, batch); one warp per query row. Keys are loaded in
// tiles of 32 into shared memory (fp32); lane j scores key j of the tile, the warp keeps an
// online softmax (running max m, running sum l) and each lane accumulates the output dims
// d = lane, lane + 32, ... . lse = m + log(l) is saved for the backward.
//
// Backward (no atomics, fixed order): D_i = dout_i . out_i, P_ij = exp(s_ij - lse_i),
// dS_ij = P_ij (dout_i . v_j - D_i).
//   dq kernel:  one warp per query row i, looping over key tiles: dQ_i = scale sum_j dS_ij k_j.
//   dkv kernel: one warp per key row j of a key/value head, looping over the group's query heads
//               in order and their query tiles: dV_j = sum_i P_ij dout_i,
//               dK_j = scale sum_i dS_ij q_i.
#include <type_traits>

#include "gpu/cuda/common.cuh"

namespace strata::gpu::cuda {
namespace {

constexpr int kWarps = 8;  // rows per block
constexpr int kTile = 32;  // keys (forward, dq) or queries (dkv) per shared-memory tile
// Each kernel is built for kPer head dimensions per lane (d = lane, lane + 32, ...): 1, 2, 4 or 8,
// the least that covers the head size (at most kMaxHeadSize = 8 * 32).
constexpr unsigned kFull = 0xffffffffu;

struct Geometry {
  int T;        // sequence length
  int C;        // channels
  int NH;       // query heads
  int NKV;      // key/value heads
  int group;    // NH / NKV
  int HS;       // head size
  int width;    // qkv row: C + 2 * NKV * HS
  float scale;  // 1 / sqrt(HS)
};

// Offset of element d of row t, part (0 q, 1 k, 2 v), head h of that part, batch b in qkv.
__device__ __forceinline__ int64_t qkv_index(const Geometry& g, int b, int t, int part, int h,
                                             int d) {
  const int64_t col =
      part == 0 ? int64_t{h} * g.HS : g.C + int64_t{part - 1} * g.NKV * g.HS + int64_t{h} * g.HS;
  return (int64_t{b} * g.T + t) * g.width + col + d;
}
// Offset of element d of row t, head h, batch b in a [B, T, C] tensor.
__device__ __forceinline__ int64_t btc_index(const Geometry& g, int b, int t, int h, int d) {
  return (int64_t{b} * g.T + t) * g.C + int64_t{h} * g.HS + d;
}

// Loads rows row0 .. row0+kTile-1 of `part` into tile [kTile][HS+1] (fp32, times `mul`); rows
// at or past T are zero. Called by the whole block.
template <typename T>
__device__ void load_tile(float* tile, const T* qkv, const Geometry& g, int b, int h, int part,
                          int row0, float mul) {
  const int ld = g.HS + 1;
  for (int e = threadIdx.x; e < kTile * g.HS; e += blockDim.x) {
    const int j = e / g.HS;
    const int d = e % g.HS;
    const int row = row0 + j;
    tile[j * ld + d] = row < g.T ? load_f32(qkv + qkv_index(g, b, row, part, h, d)) * mul : 0.0f;
  }
}

// Same for a [B, T, C] tensor (dout).
template <typename T>
__device__ void load_tile_btc(float* tile, const T* x, const Geometry& g, int b, int h, int row0) {
  const int ld = g.HS + 1;
  for (int e = threadIdx.x; e < kTile * g.HS; e += blockDim.x) {
    const int j = e / g.HS;
    const int d = e % g.HS;
    const int row = row0 + j;
    tile[j * ld + d] = row < g.T ? load_f32(x + btc_index(g, b, row, h, d)) : 0.0f;
  }
}

__device__ __forceinline__ float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

template <typename T, int kPer>
__global__ void attention_forward_kernel(T* out, float* lse, const T* qkv, Geometry g) {
  extern __shared__ float smem[];
  const int ld = g.HS + 1;
  float* k_s = smem;              // [kTile][ld]
  float* v_s = k_s + kTile * ld;  // [kTile][ld]
  float* q_s = v_s + kTile * ld;  // [kWarps][HS], scaled
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int b = static_cast<int>(blockIdx.z);
  const int h = static_cast<int>(blockIdx.y);
  const int q0 = static_cast<int>(blockIdx.x) * kWarps;
  const int i = q0 + warp;
  const bool active = i < g.T;
  float* q_w = q_s + warp * g.HS;
  if (active) {
    for (int d = lane; d < g.HS; d += 32)
      q_w[d] = load_f32(qkv + qkv_index(g, b, i, 0, h, d)) * g.scale;
  }
  float m = -INFINITY;
  float l = 0.0f;
  float acc[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) acc[u] = 0.0f;
  const int q_last = min(q0 + kWarps, g.T) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += kTile) {
    __syncthreads();  // the previous tile has been consumed (and q_w is written)
    load_tile(k_s, qkv, g, b, h / g.group, 1, k0, 1.0f);
    load_tile(v_s, qkv, g, b, h / g.group, 2, k0, 1.0f);
    __syncthreads();
    if (active && k0 <= i) {  // uniform over the warp
      const int key = k0 + lane;
      const bool visible = key <= i;
      const float sc = visible ? dot(q_w, k_s + lane * ld, g.HS) : -INFINITY;
      const float m_new = fmaxf(m, warp_max(sc));  // finite: key k0 <= i is visible
      const float p = visible ? expf(sc - m_new) : 0.0f;
      const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
      l = l * corr + warp_sum(p);
#pragma unroll
      for (int u = 0; u < kPer; ++u) acc[u] *= corr;
      for (int j = 0; j < kTile; ++j) {
        const float pj = __shfl_sync(kFull, p, j);
#pragma unroll
        for (int u = 0; u < kPer; ++u) {
          const int d = lane + 32 * u;
          if (d < g.HS) acc[u] += pj * v_s[j * ld + d];
        }
      }
      m = m_new;
    }
  }
  if (active) {
    const float inv = 1.0f / l;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int d = lane + 32 * u;
      if (d < g.HS) store_f32(out + btc_index(g, b, i, h, d), acc[u] * inv);
    }
    if (lane == 0) lse[(int64_t{b} * g.NH + h) * g.T + i] = m + logf(l);
  }
}

template <typename T, int kPer>
__global__ void attention_backward_dq_kernel(T* dqkv, const T* dout, const T* qkv, const T* out,
                                             const float* lse, Geometry g) {
  extern __shared__ float smem[];
  const int ld = g.HS + 1;
  float* k_s = smem;                  // [kTile][ld]
  float* v_s = k_s + kTile * ld;      // [kTile][ld]
  float* q_s = v_s + kTile * ld;      // [kWarps][HS], scaled
  float* do_s = q_s + kWarps * g.HS;  // [kWarps][HS]
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int b = static_cast<int>(blockIdx.z);
  const int h = static_cast<int>(blockIdx.y);
  const int q0 = static_cast<int>(blockIdx.x) * kWarps;
  const int i = q0 + warp;
  const bool active = i < g.T;
  float* q_w = q_s + warp * g.HS;
  float* do_w = do_s + warp * g.HS;
  float D = 0.0f;
  float lse_i = 0.0f;
  if (active) {
    float part = 0.0f;
    for (int d = lane; d < g.HS; d += 32) {
      q_w[d] = load_f32(qkv + qkv_index(g, b, i, 0, h, d)) * g.scale;
      const float dy = load_f32(dout + btc_index(g, b, i, h, d));
      do_w[d] = dy;
      part += dy * load_f32(out + btc_index(g, b, i, h, d));
    }
    D = warp_sum(part);
    lse_i = lse[(int64_t{b} * g.NH + h) * g.T + i];
  }
  float acc[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) acc[u] = 0.0f;
  const int q_last = min(q0 + kWarps, g.T) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += kTile) {
    __syncthreads();
    load_tile(k_s, qkv, g, b, h / g.group, 1, k0, 1.0f);
    load_tile(v_s, qkv, g, b, h / g.group, 2, k0, 1.0f);
    __syncthreads();
    if (active && k0 <= i) {  // uniform over the warp
      const int key = k0 + lane;
      float ds = 0.0f;
      if (key <= i) {
        const float p = expf(dot(q_w, k_s + lane * ld, g.HS) - lse_i);
        const float dp = dot(do_w, v_s + lane * ld, g.HS);
        ds = p * (dp - D);
      }
      for (int j = 0; j < kTile; ++j) {
        const float dsj = __shfl_sync(kFull, ds, j);
#pragma unroll
        for (int u = 0; u < kPer; ++u) {
          const int d = lane + 32 * u;
          if (d < g.HS) acc[u] += dsj * k_s[j * ld + d];
        }
      }
    }
  }
  if (active) {
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int d = lane + 32 * u;
      if (d < g.HS) store_f32(dqkv + qkv_index(g, b, i, 0, h, d), acc[u] * g.scale);
    }
  }
}

template <typename T, int kPer>
__global__ void attention_backward_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const T* out,
                                              const float* lse, Geometry g) {
  extern __shared__ float smem[];
  const int ld = g.HS + 1;
  float* q_s = smem;                 // [kTile][ld], scaled
  float* do_s = q_s + kTile * ld;    // [kTile][ld]
  float* k_s = do_s + kTile * ld;    // [kWarps][HS]
  float* v_s = k_s + kWarps * g.HS;  // [kWarps][HS]
  float* D_s = v_s + kWarps * g.HS;  // [kTile]
  float* lse_s = D_s + kTile;        // [kTile]
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int b = static_cast<int>(blockIdx.z);
  const int kvh = static_cast<int>(blockIdx.y);  // the key/value head
  const int k0 = static_cast<int>(blockIdx.x) * kWarps;
  const int j = k0 + warp;  // this warp's key row
  const bool active = j < g.T;
  float* k_w = k_s + warp * g.HS;
  float* v_w = v_s + warp * g.HS;
  if (active) {
    for (int d = lane; d < g.HS; d += 32) {
      k_w[d] = load_f32(qkv + qkv_index(g, b, j, 1, kvh, d));
      v_w[d] = load_f32(qkv + qkv_index(g, b, j, 2, kvh, d));
    }
  }
  float acc_k[kPer];
  float acc_v[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) acc_k[u] = acc_v[u] = 0.0f;
  for (int h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {  // the group's query heads
    for (int qs = (k0 / kTile) * kTile; qs < g.T; qs += kTile) {
      __syncthreads();
      load_tile(q_s, qkv, g, b, h, 0, qs, g.scale);
      load_tile_btc(do_s, dout, g, b, h, qs);
      if (threadIdx.x < kTile) {
        const int qi = qs + static_cast<int>(threadIdx.x);
        lse_s[threadIdx.x] = qi < g.T ? lse[(int64_t{b} * g.NH + h) * g.T + qi] : 0.0f;
      }
      __syncthreads();
      for (int t = warp; t < kTile; t += kWarps) {  // D of the tile's queries, one warp each
        const int qi = qs + t;
        float part = 0.0f;
        if (qi < g.T) {
          for (int d = lane; d < g.HS; d += 32) {
            part += do_s[t * ld + d] * load_f32(out + btc_index(g, b, qi, h, d));
          }
        }
        part = warp_sum(part);
        if (lane == 0) D_s[t] = part;
      }
      __syncthreads();
      if (active && qs + kTile - 1 >= j) {  // uniform over the warp
        const int qi = qs + lane;
        float p = 0.0f;
        float ds = 0.0f;
        if (qi >= j && qi < g.T) {
          p = expf(dot(q_s + lane * ld, k_w, g.HS) - lse_s[lane]);
          const float dp = dot(do_s + lane * ld, v_w, g.HS);
          ds = p * (dp - D_s[lane]);
        }
        for (int t = 0; t < kTile; ++t) {
          const float pt = __shfl_sync(kFull, p, t);
          const float dst = __shfl_sync(kFull, ds, t);
#pragma unroll
          for (int u = 0; u < kPer; ++u) {
            const int d = lane + 32 * u;
            if (d < g.HS) {
              acc_v[u] += pt * do_s[t * ld + d];
              acc_k[u] += dst * q_s[t * ld + d];
            }
          }
        }
      }
    }
  }
  if (active) {
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int d = lane + 32 * u;
      if (d < g.HS) {
        store_f32(dqkv + qkv_index(g, b, j, 1, kvh, d), acc_k[u]);
        store_f32(dqkv + qkv_index(g, b, j, 2, kvh, d), acc_v[u]);
      }
    }
  }
}

Geometry make_geometry(int64_t T, int64_t C, int64_t NH, int64_t NKV) {
  const int hs = static_cast<int>(C / NH);
  return Geometry{static_cast<int>(T),
                  static_cast<int>(C),
                  static_cast<int>(NH),
                  static_cast<int>(NKV),
                  static_cast<int>(NH / NKV),
                  hs,
                  static_cast<int>(C + 2 * NKV * hs),
                  1.0f / sqrtf(static_cast<float>(hs))};
}

dim3 grid_of(int64_t B, int64_t T, int64_t NH) {
  return dim3(static_cast<unsigned>((T + kWarps - 1) / kWarps), static_cast<unsigned>(NH),
              static_cast<unsigned>(B));
}

// Allows `bytes` of dynamic shared memory for `kernel` (needed above 48 KiB).
template <typename K>
cudaError_t allow_shared(K kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

size_t tiles_bytes(const Geometry& g) {
  return sizeof(float) * (size_t{2} * kTile * (g.HS + 1) + size_t{2} * kWarps * g.HS + 2 * kTile);
}

// Calls f(std::integral_constant<int, P>{}) with P the dims per lane for head size `hs`.
template <typename F>
cudaError_t with_dims_per_lane(int hs, F&& f) {
  if (hs <= 32) return f(std::integral_constant<int, 1>{});
  if (hs <= 64) return f(std::integral_constant<int, 2>{});
  if (hs <= 128) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

struct AttentionForward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* out, float* lse, const void* qkv, int64_t B,
                         int64_t T_, int64_t C, int64_t NH, int64_t NKV) {
    const Geometry g = make_geometry(T_, C, NH, NKV);
    const size_t bytes = tiles_bytes(g);
    return with_dims_per_lane(g.HS, [&](auto per) {
      auto* kernel = attention_forward_kernel<T, decltype(per)::value>;
      cudaError_t err = allow_shared(kernel, bytes);
      if (err != cudaSuccess) return err;
      kernel<<<grid_of(B, T_, NH), kWarps * 32, bytes, s>>>(static_cast<T*>(out), lse,
                                                            static_cast<const T*>(qkv), g);
      return launch_result();
    });
  }
};

struct AttentionBackward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* dqkv, const void* dout, const void* qkv,
                         const void* out, const float* lse, int64_t B, int64_t T_, int64_t C,
                         int64_t NH, int64_t NKV) {
    const Geometry g = make_geometry(T_, C, NH, NKV);
    const size_t bytes = tiles_bytes(g);
    return with_dims_per_lane(g.HS, [&](auto per) {
      auto* dq = attention_backward_dq_kernel<T, decltype(per)::value>;
      auto* dkv = attention_backward_dkv_kernel<T, decltype(per)::value>;
      cudaError_t err = allow_shared(dq, bytes);
      if (err == cudaSuccess) err = allow_shared(dkv, bytes);
      if (err != cudaSuccess) return err;
      dq<<<grid_of(B, T_, NH), kWarps * 32, bytes, s>>>(
          static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv),
          static_cast<const T*>(out), lse, g);
      err = launch_result();
      if (err != cudaSuccess) return err;
      dkv<<<grid_of(B, T_, NKV), kWarps * 32, bytes, s>>>(
          static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv),
          static_cast<const T*>(out), lse, g);
      return launch_result();
    });
  }
};

}  // namespace

cudaError_t launch_attention_forward(cudaStream_t stream, void* out, float* lse, const void* qkv,
                                     int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                     ElemType t) {
  if (B * T * C == 0) return cudaSuccess;
  if (attention_uses_tensor_cores(C, NH, t)) {
    return launch_attention_forward_tc(stream, out, lse, qkv, B, T, C, NH, NKV, t);
  }
  return dispatch<AttentionForward>(t, stream, out, lse, qkv, B, T, C, NH, NKV);
}

cudaError_t launch_attention_backward(cudaStream_t stream, void* dqkv, const void* dout,
                                      const void* qkv, const void* out, const float* lse, int64_t B,
                                      int64_t T, int64_t C, int64_t NH, int64_t NKV, ElemType t,
                                      float* scratch) {
  if (B * T * C == 0) return cudaSuccess;
  if (attention_uses_tensor_cores(C, NH, t)) {
    return launch_attention_backward_tc(stream, dqkv, dout, qkv, out, lse, B, T, C, NH, NKV, t,
                                        scratch);
  }
  return dispatch<AttentionBackward>(t, stream, dqkv, dout, qkv, out, lse, B, T, C, NH, NKV);
}

}  // namespace strata::gpu::cuda
