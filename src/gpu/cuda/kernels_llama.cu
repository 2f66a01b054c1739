// Rotary position embeddings and the SwiGLU activation of Llama-shaped models, forward and
// backward (RMSNorm is in kernels_layernorm.cu, beside LayerNorm). Grid-stride loops over int64
// indices; each element (a rotated pair for rope) is computed independently, so results do not
// depend on the launch shape.
#include "gpu/cuda/common.cuh"

namespace strata::gpu::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per rotated pair (row, head, i < HS/2), in place.
template <typename T>
__global__ void rope_kernel(T* x, const float* inv_freq, int64_t rows, int64_t T_, int64_t heads,
                            int64_t HS, int64_t stride, float sign) {
  const int64_t half = HS / 2;
  const int64_t total = rows * heads * half;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = k % half;
    const int64_t h = (k / half) % heads;
    const int64_t r = k / (half * heads);
    const float angle = static_cast<float>(r % T_) * inv_freq[i];
    const float c = cosf(angle);
    const float s = sign * sinf(angle);
    T* q = x + r * stride + h * HS;
    const float a = load_f32(q + i);
    const float b = load_f32(q + i + half);
    store_f32(q + i, a * c - b * s);
    store_f32(q + i + half, b * c + a * s);
  }
}

__device__ __forceinline__ float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gate_up, int64_t N, int64_t H) {
  const int64_t total = N * H;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = k / H;
    const int64_t i = k % H;
    const float a = load_f32(gate_up + r * 2 * H + i);
    const float up = load_f32(gate_up + r * 2 * H + H + i);
    store_f32(out + k, a * sigmoid(a) * up);
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgate_up, const T* gate_up, const T* dout, int64_t N,
                                       int64_t H) {
  const int64_t total = N * H;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = k / H;
    const int64_t i = k % H;
    const float a = load_f32(gate_up + r * 2 * H + i);
    const float up = load_f32(gate_up + r * 2 * H + H + i);
    const float g = load_f32(dout + k);
    const float sg = sigmoid(a);
    store_f32(dgate_up + r * 2 * H + i, g * up * sg * (1.0f + a * (1.0f - sg)));
    store_f32(dgate_up + r * 2 * H + H + i, g * a * sg);
  }
}

struct Rope {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* x, const float* inv_freq, int64_t rows, int64_t T_,
                         int64_t heads, int64_t HS, int64_t stride, float sign) {
    rope_kernel<T><<<grid_for(rows * heads * (HS / 2), kThreads), kThreads, 0, s>>>(
        static_cast<T*>(x), inv_freq, rows, T_, heads, HS, stride, sign);
    return launch_result();
  }
};
struct SwigluForward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* out, const void* gate_up, int64_t N, int64_t H) {
    swiglu_forward_kernel<T><<<grid_for(N * H, kThreads), kThreads, 0, s>>>(
        static_cast<T*>(out), static_cast<const T*>(gate_up), N, H);
    return launch_result();
  }
};
struct SwigluBackward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* dgate_up, const void* gate_up, const void* dout,
                         int64_t N, int64_t H) {
    swiglu_backward_kernel<T><<<grid_for(N * H, kThreads), kThreads, 0, s>>>(
        static_cast<T*>(dgate_up), static_cast<const T*>(gate_up), static_cast<const T*>(dout), N,
        H);
    return launch_result();
  }
};

}  // namespace

cudaError_t launch_rope(cudaStream_t stream, void* x, const float* inv_freq, int64_t B, int64_t T,
                        int64_t heads, int64_t HS, int64_t stride, bool inverse, ElemType t) {
  if (B * T * heads * HS == 0) return cudaSuccess;
  return dispatch<Rope>(t, stream, x, inv_freq, B * T, T, heads, HS, stride,
                        inverse ? -1.0f : 1.0f);
}

cudaError_t launch_swiglu_forward(cudaStream_t stream, void* out, const void* gate_up, int64_t N,
                                  int64_t H, ElemType t) {
  if (N * H == 0) return cudaSuccess;
  return dispatch<SwigluForward>(t, stream, out, gate_up, N, H);
}

cudaError_t launch_swiglu_backward(cudaStream_t stream, void* dgate_up, const void* gate_up,
                                   const void* dout, int64_t N, int64_t H, ElemType t) {
  if (N * H == 0) return cudaSuccess;
  return dispatch<SwigluBackward>(t, stream, dgate_up, gate_up, dout, N, H);
}

}  // namespace strata::gpu::cuda
