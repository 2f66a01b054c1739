// LayerNorm and RMSNorm forward and backward. Forward: one block per row; LayerNorm makes two
// passes for mean and variance (fp32), rstd = 1 / sqrt(var + eps); RMSNorm one, rstd =
// 1 / sqrt(mean(x^2) + eps). Backward: one block per row for dinp; dweight (and LayerNorm's dbias)
// by column kernels over row chunks, then the chunks in order (fixed summation order).
#include <algorithm>

#include "gpu/cuda/common.cuh"

namespace strata::gpu::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row. Packed (C a multiple of kPack<T> and every pointer 16-byte aligned): each
// thread reads and writes 16 bytes at a time, pack p = threadIdx.x, threadIdx.x + blockDim.x,
// ...; otherwise element by element. The row's three reads come from L1/L2 after the first.
// With a residual (kResidual): the first pass reads a and b (rows of `inp` and `add`), stores
// their sum rounded into `residual` and sums the rounded values; the later passes read it back
// (the thread's own elements: no barrier needed), so the bits are those of add() and then
// layernorm_forward() with the same packing.
template <typename T, bool kResidual>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, T* residual,
                                         const T* inp, const T* add, const T* weight, const T* bias,
                                         int64_t C, float eps, bool packed) {
  constexpr int kW = kPack<T>;
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const T* x = kResidual ? residual + row * C : inp + row * C;
  T* y = out + row * C;
  const int64_t packs = packed ? C / kW : 0;
  float sum = 0.0f;
  if (packed) {
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      float v[kW];
      if (kResidual) {
        float w[kW];
        load_pack(inp + row * C + p * kW, v);
        load_pack(add + row * C + p * kW, w);
#pragma unroll
        for (int j = 0; j < kW; ++j) v[j] += w[j];
        store_pack(residual + row * C + p * kW, v);
      }
      load_pack(x + p * kW, v);  // the rounded values
#pragma unroll
      for (int j = 0; j < kW; ++j) sum += v[j];
    }
  } else {
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      if (kResidual) {
        store_f32(residual + row * C + i,
                  load_f32(inp + row * C + i) + load_f32(add + row * C + i));
      }
      sum += load_f32(x + i);
    }
  }
  const float m = block_sum(sum, shared) / static_cast<float>(C);
  float sq = 0.0f;
  if (packed) {
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      float v[kW];
      load_pack(x + p * kW, v);
#pragma unroll
      for (int j = 0; j < kW; ++j) sq += (v[j] - m) * (v[j] - m);
    }
  } else {
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const float d = load_f32(x + i) - m;
      sq += d * d;
    }
  }
  const float var = block_sum(sq, shared) / static_cast<float>(C);
  const float s = 1.0f / sqrtf(var + eps);
  if (packed) {
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      float v[kW], w[kW], b[kW];
      load_pack(x + p * kW, v);
      load_pack(weight + p * kW, w);
      load_pack(bias + p * kW, b);
#pragma unroll
      for (int j = 0; j < kW; ++j) v[j] = (v[j] - m) * s * w[j] + b[j];
      store_pack(y + p * kW, v);
    }
  } else {
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const float n = (load_f32(x + i) - m) * s;
      store_f32(y + i, n * load_f32(weight + i) + load_f32(bias + i));
    }
  }
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, dnorm = weight * dout.
// One block per row, packed as the forward (16 bytes of each operand at a time) or element by
// element.
template <typename T>
__global__ void layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp,
                                               const T* weight, const float* mean,
                                               const float* rstd, int64_t C, bool packed) {
  constexpr int kW = kPack<T>;
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  T* dx = dinp + row * C;
  const float m = mean[row];
  const float s = rstd[row];
  const int64_t packs = packed ? C / kW : 0;
  float sum_dnorm = 0.0f;
  float sum_dnorm_norm = 0.0f;
  if (packed) {
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      float xv[kW], wv[kW], gv[kW];
      load_pack(x + p * kW, xv);
      load_pack(weight + p * kW, wv);
      load_pack(dy + p * kW, gv);
#pragma unroll
      for (int j = 0; j < kW; ++j) {
        const float dnorm = wv[j] * gv[j];
        sum_dnorm += dnorm;
        sum_dnorm_norm += dnorm * ((xv[j] - m) * s);
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const float dnorm = load_f32(weight + i) * load_f32(dy + i);
      sum_dnorm += dnorm;
      sum_dnorm_norm += dnorm * ((load_f32(x + i) - m) * s);
    }
  }
  const float mean_dnorm = block_sum(sum_dnorm, shared) / static_cast<float>(C);
  const float mean_dnorm_norm = block_sum(sum_dnorm_norm, shared) / static_cast<float>(C);
  if (packed) {
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      float xv[kW], wv[kW], gv[kW], dv[kW];
      load_pack(x + p * kW, xv);
      load_pack(weight + p * kW, wv);
      load_pack(dy + p * kW, gv);
      load_pack(dx + p * kW, dv);
#pragma unroll
      for (int j = 0; j < kW; ++j) {
        const float norm = (xv[j] - m) * s;
        dv[j] += (wv[j] * gv[j] - mean_dnorm - norm * mean_dnorm_norm) * s;
      }
      store_pack(dx + p * kW, dv);
    }
  } else {
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const float norm = (load_f32(x + i) - m) * s;
      const float dnorm = load_f32(weight + i) * load_f32(dy + i);
      const float g = (dnorm - mean_dnorm - norm * mean_dnorm_norm) * s;
      store_f32(dx + i, load_f32(dx + i) + g);
    }
  }
}

// dweight[c] += sum_r dout[r, c] * norm[r, c]; dbias[c] += sum_r dout[r, c], in two passes so
// that the GPU is filled whatever C (one block per 32 columns alone is C/32 blocks: 24 for GPT-2
// small). Pass 1: block (x, y) takes columns 32x.. and the rows of chunk y; thread (tx, ty) sums
// rows ty, ty + kRowGroups, ... of the chunk in order, then row 0 adds the kRowGroups partials in
// order and writes the chunk's sums to scratch[y][0, C) (dweight) and scratch[y][C, 2C) (dbias).
// Pass 2: each column adds its chunks' sums in chunk order. No atomics: the same bits every run.
// kCentered: LayerNorm (norm = (x - mean) * rstd, and dbias); else RMSNorm (norm = x * rstd, no
// mean and no bias).
template <typename T, bool kCentered>
__global__ void norm_backward_params_partial_kernel(float* scratch, const T* dout, const T* inp,
                                                    const float* mean, const float* rstd, int64_t N,
                                                    int64_t C, int64_t rows_per_chunk) {
  __shared__ float partial_w[kRowGroups][32];
  __shared__ float partial_b[kRowGroups][32];
  const int64_t col = blockIdx.x * int64_t{32} + threadIdx.x;
  const int64_t first = blockIdx.y * rows_per_chunk;
  const int64_t end = first + rows_per_chunk < N ? first + rows_per_chunk : N;
  float dw = 0.0f;
  float db = 0.0f;
  if (col < C) {
    for (int64_t r = first + threadIdx.y; r < end; r += kRowGroups) {
      const float dy = load_f32(dout + r * C + col);
      const float x = load_f32(inp + r * C + col);
      const float norm = (kCentered ? x - mean[r] : x) * rstd[r];
      dw += dy * norm;
      db += dy;
    }
  }
  partial_w[threadIdx.y][threadIdx.x] = dw;
  partial_b[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && col < C) {
    float tw = 0.0f;
    float tb = 0.0f;
    for (int g = 0; g < kRowGroups; ++g) {
      tw += partial_w[g][threadIdx.x];
      tb += partial_b[g][threadIdx.x];
    }
    float* chunk = scratch + int64_t{blockIdx.y} * 2 * C;
    chunk[col] = tw;
    if (kCentered) chunk[C + col] = tb;
  }
}

// dbias may be null (RMSNorm).
template <typename T>
__global__ void norm_backward_params_final_kernel(T* dweight, T* dbias, const float* scratch,
                                                  int64_t C, int chunks) {
  const int64_t col = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (col >= C) return;
  float tw = 0.0f;
  float tb = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    tw += scratch[int64_t{k} * 2 * C + col];
    if (dbias != nullptr) tb += scratch[int64_t{k} * 2 * C + C + col];
  }
  store_f32(dweight + col, load_f32(dweight + col) + tw);
  if (dbias != nullptr) store_f32(dbias + col, load_f32(dbias + col) + tb);
}

// Both passes over the parameters' gradients.
template <typename T, bool kCentered>
cudaError_t norm_backward_params(cudaStream_t s, void* dweight, void* dbias, const void* dout,
                                 const void* inp, const float* mean, const float* rstd, int64_t N,
                                 int64_t C, float* scratch) {
  const int chunks = layernorm_param_chunks(N, C);
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  const dim3 block(32, kRowGroups);
  const dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(chunks));
  norm_backward_params_partial_kernel<T, kCentered>
      <<<grid, block, 0, s>>>(scratch, static_cast<const T*>(dout), static_cast<const T*>(inp),
                              mean, rstd, N, C, rows_per_chunk);
  const cudaError_t err = launch_result();
  if (err != cudaSuccess) return err;
  norm_backward_params_final_kernel<T><<<static_cast<unsigned>((C + 255) / 256), 256, 0, s>>>(
      static_cast<T*>(dweight), static_cast<T*>(dbias), scratch, C, chunks);
  return launch_result();
}

template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const T* weight,
                                       int64_t C, float eps) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const T* x = inp + row * C;
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float v = load_f32(x + i);
    sq += v * v;
  }
  const float s = 1.0f / sqrtf(block_sum(sq, shared) / static_cast<float>(C) + eps);
  T* y = out + row * C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    store_f32(y + i, load_f32(x + i) * s * load_f32(weight + i));
  }
  if (threadIdx.x == 0) rstd[row] = s;
}

// dinp += rstd * (weight * dout - xhat * mean(weight * dout * xhat)), xhat = inp * rstd.
template <typename T>
__global__ void rmsnorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                             const float* rstd, int64_t C) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  const float s = rstd[row];
  float dot = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    dot += load_f32(weight + i) * load_f32(dy + i) * (load_f32(x + i) * s);
  }
  const float mean_dot = block_sum(dot, shared) / static_cast<float>(C);
  T* dx = dinp + row * C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float g = (load_f32(weight + i) * load_f32(dy + i) - load_f32(x + i) * s * mean_dot) * s;
    store_f32(dx + i, load_f32(dx + i) + g);
  }
}

struct LayernormForward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* out, float* mean, float* rstd, void* residual,
                         const void* a, const void* b, const void* weight, const void* bias,
                         int64_t N, int64_t C, float eps) {
    const bool packed = C % kPack<T> == 0 && aligned16({out, residual, a, b, weight, bias});
    const auto grid = static_cast<unsigned>(N);
    if (residual == nullptr) {
      layernorm_forward_kernel<T, false><<<grid, kThreads, 0, s>>>(
          static_cast<T*>(out), mean, rstd, nullptr, static_cast<const T*>(a), nullptr,
          static_cast<const T*>(weight), static_cast<const T*>(bias), C, eps, packed);
    } else {
      layernorm_forward_kernel<T, true><<<grid, kThreads, 0, s>>>(
          static_cast<T*>(out), mean, rstd, static_cast<T*>(residual), static_cast<const T*>(a),
          static_cast<const T*>(b), static_cast<const T*>(weight), static_cast<const T*>(bias), C,
          eps, packed);
    }
    return launch_result();
  }
};

struct LayernormBackward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* dinp, void* dweight, void* dbias, const void* dout,
                         const void* inp, const void* weight, const float* mean, const float* rstd,
                         int64_t N, int64_t C, float* scratch) {
    const bool packed = C % kPack<T> == 0 && aligned16({dinp, dout, inp, weight});
    layernorm_backward_dinp_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, s>>>(
        static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp),
        static_cast<const T*>(weight), mean, rstd, C, packed);
    cudaError_t err = launch_result();
    if (err != cudaSuccess) return err;
    return norm_backward_params<T, true>(s, dweight, dbias, dout, inp, mean, rstd, N, C, scratch);
  }
};

struct RmsnormForward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* out, float* rstd, const void* inp,
                         const void* weight, int64_t N, int64_t C, float eps) {
    rmsnorm_forward_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, s>>>(
        static_cast<T*>(out), rstd, static_cast<const T*>(inp), static_cast<const T*>(weight), C,
        eps);
    return launch_result();
  }
};

struct RmsnormBackward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* dinp, void* dweight, const void* dout,
                         const void* inp, const void* weight, const float* rstd, int64_t N,
                         int64_t C, float* scratch) {
    rmsnorm_backward_dinp_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, s>>>(
        static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp),
        static_cast<const T*>(weight), rstd, C);
    const cudaError_t err = launch_result();
    if (err != cudaSuccess) return err;
    return norm_backward_params<T, false>(s, dweight, nullptr, dout, inp, nullptr, rstd, N, C,
                                          scratch);
  }
};

}  // namespace

cudaError_t launch_rmsnorm_forward(cudaStream_t stream, void* out, float* rstd, const void* inp,
                                   const void* weight, int64_t N, int64_t C, float eps,
                                   ElemType t) {
  if (N == 0 || C == 0) return cudaSuccess;
  return dispatch<RmsnormForward>(t, stream, out, rstd, inp, weight, N, C, eps);
}

cudaError_t launch_rmsnorm_backward(cudaStream_t stream, void* dinp, void* dweight,
                                    const void* dout, const void* inp, const void* weight,
                                    const float* rstd, int64_t N, int64_t C, ElemType t,
                                    float* scratch) {
  if (N == 0 || C == 0) return cudaSuccess;
  return dispatch<RmsnormBackward>(t, stream, dinp, dweight, dout, inp, weight, rstd, N, C,
                                   scratch);
}

cudaError_t launch_layernorm_forward(cudaStream_t stream, void* out, float* mean, float* rstd,
                                     void* residual, const void* a, const void* b,
                                     const void* weight, const void* bias, int64_t N, int64_t C,
                                     float eps, ElemType t) {
  if (N == 0 || C == 0) return cudaSuccess;
  return dispatch<LayernormForward>(t, stream, out, mean, rstd, residual, a, b, weight, bias, N, C,
                                    eps);
}

cudaError_t launch_layernorm_backward(cudaStream_t stream, void* dinp, void* dweight, void* dbias,
                                      const void* dout, const void* inp, const void* weight,
                                      const float* mean, const float* rstd, int64_t N, int64_t C,
                                      ElemType t, float* scratch) {
  if (N == 0 || C == 0) return cudaSuccess;
  return dispatch<LayernormBackward>(t, stream, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                     N, C, scratch);
}

int column_reduction_chunks(int64_t rows, int64_t columns, int64_t per_column) {
  constexpr int64_t kTargetBlocks = 528;  // four blocks per SM of an H100/H200 (132 SMs)
  const int64_t column_blocks = (columns + 31) / 32;
  int64_t chunks = (kTargetBlocks + column_blocks - 1) / column_blocks;
  // A chunk: kRowGroups rows or more.
  chunks = std::min(chunks, (rows + kRowGroups - 1) / kRowGroups);
  chunks = std::min(chunks, kStreamScratchFloats / std::max<int64_t>(1, per_column * columns));
  return static_cast<int>(std::max<int64_t>(1, chunks));
}

int layernorm_param_chunks(int64_t N, int64_t C) { return column_reduction_chunks(N, C, 2); }

int bias_backward_chunks(int64_t m, int64_t n) { return column_reduction_chunks(m, n, 1); }

}  // namespace strata::gpu::cuda
