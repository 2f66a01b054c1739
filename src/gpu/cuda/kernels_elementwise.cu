// Elementwise kernels: bias add (after a matmul), GELU and its backward, add, scale and casts.
// Grid-stride loops over int64 indices; each element is computed independently, so results do
// not depend on the launch shape.
#include "gpu/cuda/common.cuh"

namespace strata::gpu::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void add_bias_rows_kernel(T* c, const T* bias, int64_t m, int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_f32(c + i, load_f32(c + i) + load_f32(bias + i % n));
  }
}

// sqrt(2 / pi)
constexpr float kGeluScale = 0.7978845608028654f;

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = load_f32(inp + i);
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    store_f32(out + i, 0.5f * x * (1.0f + tanhf(u)));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = load_f32(inp + i);
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = tanhf(u);
    const float sech2 = 1.0f - th * th;
    const float du_dx = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
    store_f32(dinp + i, grad * load_f32(dout + i));
  }
}

template <typename T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_f32(out + i, load_f32(a + i) + load_f32(b + i));
  }
}

template <typename T>
__global__ void scale_kernel(T* x, float factor, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_f32(x + i, load_f32(x + i) * factor);
  }
}

template <typename D, typename S>
__global__ void cast_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_f32(dst + i, load_f32(src + i));
  }
}

struct AddBiasRows {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* c, const void* bias, int64_t m, int64_t n) {
    add_bias_rows_kernel<T><<<grid_for(m * n, kThreads), kThreads, 0, s>>>(
        static_cast<T*>(c), static_cast<const T*>(bias), m, n);
    return launch_result();
  }
};
struct GeluForward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* out, const void* inp, int64_t n) {
    gelu_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, s>>>(
        static_cast<T*>(out), static_cast<const T*>(inp), n);
    return launch_result();
  }
};
struct GeluBackward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* dinp, const void* inp, const void* dout, int64_t n) {
    gelu_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, s>>>(
        static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), n);
    return launch_result();
  }
};
struct Add {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* out, const void* a, const void* b, int64_t n) {
    add_kernel<T><<<grid_for(n, kThreads), kThreads, 0, s>>>(
        static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
    return launch_result();
  }
};
struct Scale {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* x, float factor, int64_t n) {
    scale_kernel<T><<<grid_for(n, kThreads), kThreads, 0, s>>>(static_cast<T*>(x), factor, n);
    return launch_result();
  }
};
// Second level of the cast dispatch: the source type is fixed to S.
template <typename S>
struct CastFrom {
  template <typename D>
  static cudaError_t run(cudaStream_t s, void* dst, const void* src, int64_t n) {
    cast_kernel<D, S><<<grid_for(n, kThreads), kThreads, 0, s>>>(static_cast<D*>(dst),
                                                                 static_cast<const S*>(src), n);
    return launch_result();
  }
};
struct Cast {
  template <typename S>
  static cudaError_t run(cudaStream_t s, void* dst, ElemType dst_t, const void* src, int64_t n) {
    return dispatch<CastFrom<S>>(dst_t, s, dst, src, n);
  }
};

}  // namespace

cudaError_t launch_add_bias_rows(cudaStream_t stream, void* c, const void* bias, int64_t m,
                                 int64_t n, ElemType t) {
  if (m * n == 0) return cudaSuccess;
  return dispatch<AddBiasRows>(t, stream, c, bias, m, n);
}

cudaError_t launch_gelu_forward(cudaStream_t stream, void* out, const void* inp, int64_t n,
                                ElemType t) {
  if (n == 0) return cudaSuccess;
  return dispatch<GeluForward>(t, stream, out, inp, n);
}

cudaError_t launch_gelu_backward(cudaStream_t stream, void* dinp, const void* inp, const void* dout,
                                 int64_t n, ElemType t) {
  if (n == 0) return cudaSuccess;
  return dispatch<GeluBackward>(t, stream, dinp, inp, dout, n);
}

cudaError_t launch_add(cudaStream_t stream, void* out, const void* a, const void* b, int64_t n,
                       ElemType t) {
  if (n == 0) return cudaSuccess;
  return dispatch<Add>(t, stream, out, a, b, n);
}

cudaError_t launch_scale(cudaStream_t stream, void* x, float factor, int64_t n, ElemType t) {
  if (n == 0) return cudaSuccess;
  return dispatch<Scale>(t, stream, x, factor, n);
}

cudaError_t launch_cast(cudaStream_t stream, void* dst, ElemType dst_t, const void* src,
                        ElemType src_t, int64_t n) {
  if (n == 0) return cudaSuccess;
  return dispatch<Cast>(src_t, stream, dst, dst_t, src, n);
}

}  // namespace strata::gpu::cuda
