// LayerNorm forward and backward. Forward: one block per row, two passes for mean and variance
// (fp32), rstd = 1 / sqrt(var + eps). Backward: one block per row for dinp; dweight and dbias by
// a column kernel (32 columns x kRowGroups row groups per block, fixed summation order).
#include "gpu/cuda/common.cuh"

namespace strata::gpu::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowGroups = 16;

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const T* weight, const T* bias, int64_t C, float eps) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const T* x = inp + row * C;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) sum += load_f32(x + i);
  const float m = block_sum(sum, shared) / static_cast<float>(C);
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float d = load_f32(x + i) - m;
    sq += d * d;
  }
  const float var = block_sum(sq, shared) / static_cast<float>(C);
  const float s = 1.0f / sqrtf(var + eps);
  T* y = out + row * C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float n = (load_f32(x + i) - m) * s;
    store_f32(y + i, n * load_f32(weight + i) + load_f32(bias + i));
  }
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, dnorm = weight * dout.
template <typename T>
__global__ void layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp,
                                               const T* weight, const float* mean,
                                               const float* rstd, int64_t C) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  const float m = mean[row];
  const float s = rstd[row];
  float sum_dnorm = 0.0f;
  float sum_dnorm_norm = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float norm = (load_f32(x + i) - m) * s;
    const float dnorm = load_f32(weight + i) * load_f32(dy + i);
    sum_dnorm += dnorm;
    sum_dnorm_norm += dnorm * norm;
  }
  const float mean_dnorm = block_sum(sum_dnorm, shared) / static_cast<float>(C);
  const float mean_dnorm_norm = block_sum(sum_dnorm_norm, shared) / static_cast<float>(C);
  T* dx = dinp + row * C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float norm = (load_f32(x + i) - m) * s;
    const float dnorm = load_f32(weight + i) * load_f32(dy + i);
    const float g = (dnorm - mean_dnorm - norm * mean_dnorm_norm) * s;
    store_f32(dx + i, load_f32(dx + i) + g);
  }
}

// dweight[c] += sum_r dout[r, c] * norm[r, c]; dbias[c] += sum_r dout[r, c].
template <typename T>
__global__ void layernorm_backward_params_kernel(T* dweight, T* dbias, const T* dout, const T* inp,
                                                 const float* mean, const float* rstd, int64_t N,
                                                 int64_t C) {
  __shared__ float partial_w[kRowGroups][32];
  __shared__ float partial_b[kRowGroups][32];
  const int64_t col = blockIdx.x * int64_t{32} + threadIdx.x;
  float dw = 0.0f;
  float db = 0.0f;
  if (col < C) {
    for (int64_t r = threadIdx.y; r < N; r += kRowGroups) {
      const float dy = load_f32(dout + r * C + col);
      const float norm = (load_f32(inp + r * C + col) - mean[r]) * rstd[r];
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
    store_f32(dweight + col, load_f32(dweight + col) + tw);
    store_f32(dbias + col, load_f32(dbias + col) + tb);
  }
}

struct LayernormForward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* out, float* mean, float* rstd, const void* inp,
                         const void* weight, const void* bias, int64_t N, int64_t C, float eps) {
    layernorm_forward_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, s>>>(
        static_cast<T*>(out), mean, rstd, static_cast<const T*>(inp), static_cast<const T*>(weight),
        static_cast<const T*>(bias), C, eps);
    return launch_result();
  }
};

struct LayernormBackward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* dinp, void* dweight, void* dbias, const void* dout,
                         const void* inp, const void* weight, const float* mean, const float* rstd,
                         int64_t N, int64_t C) {
    layernorm_backward_dinp_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, s>>>(
        static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp),
        static_cast<const T*>(weight), mean, rstd, C);
    cudaError_t err = launch_result();
    if (err != cudaSuccess) return err;
    const dim3 block(32, kRowGroups);
    const dim3 grid(static_cast<unsigned>((C + 31) / 32));
    layernorm_backward_params_kernel<T><<<grid, block, 0, s>>>(
        static_cast<T*>(dweight), static_cast<T*>(dbias), static_cast<const T*>(dout),
        static_cast<const T*>(inp), mean, rstd, N, C);
    return launch_result();
  }
};

}  // namespace

cudaError_t launch_layernorm_forward(cudaStream_t stream, void* out, float* mean, float* rstd,
                                     const void* inp, const void* weight, const void* bias,
                                     int64_t N, int64_t C, float eps, ElemType t) {
  if (N == 0 || C == 0) return cudaSuccess;
  return dispatch<LayernormForward>(t, stream, out, mean, rstd, inp, weight, bias, N, C, eps);
}

cudaError_t launch_layernorm_backward(cudaStream_t stream, void* dinp, void* dweight, void* dbias,
                                      const void* dout, const void* inp, const void* weight,
                                      const float* mean, const float* rstd, int64_t N, int64_t C,
                                      ElemType t) {
  if (N == 0 || C == 0) return cudaSuccess;
  return dispatch<LayernormBackward>(t, stream, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                     N, C);
}

}  // namespace strata::gpu::cuda
