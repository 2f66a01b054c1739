// Elementwise kernels: bias add (after a matmul), GELU and its backward, add, scale, casts and
// accumulate (dst += src across dtypes).
// Grid-stride loops over int64 indices; each element is computed independently, so results do
// not depend on the launch shape. GELU, add, scale, casts and accumulate move 16 bytes at a time.
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

// Elements a thread takes at once: 16 bytes of the narrowest of the types (two 16-byte loads or
// stores of fp32 where another side is 16-bit).
template <typename TO, typename TA, typename TB = TA>
inline constexpr int kMapPack = kPack<TO> > kPack<TA>
                                    ? (kPack<TO> > kPack<TB> ? kPack<TO> : kPack<TB>)
                                    : (kPack<TA> > kPack<TB> ? kPack<TA> : kPack<TB>);

// out[i] = op(a[i], b[i]) (b null: op(a[i], 0)) for i < n, a read as TA, b as TB, out written as
// TO. Packed (every pointer 16-byte aligned): each thread takes kMapPack elements of each operand
// at a time in 16-byte loads and stores, then the tail one by one; each element's result is the
// same either way. out may alias a or b.
template <typename TO, typename TA, typename TB, typename Op>
__global__ void map_kernel(TO* out, const TA* a, const TB* b, int64_t n, bool packed, Op op) {
  constexpr int kW = kMapPack<TO, TA, TB>;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t done = 0;
  if (packed) {
    const int64_t packs = n / kW;
    for (int64_t p = first; p < packs; p += stride) {
      float x[kW], y[kW];
#pragma unroll
      for (int j = 0; j < kW; j += kPack<TA>) load_pack(a + p * kW + j, x + j);
      if (b != nullptr) {
#pragma unroll
        for (int j = 0; j < kW; j += kPack<TB>) load_pack(b + p * kW + j, y + j);
      }
#pragma unroll
      for (int j = 0; j < kW; ++j) x[j] = op(x[j], b != nullptr ? y[j] : 0.0f);
#pragma unroll
      for (int j = 0; j < kW; j += kPack<TO>) store_pack(out + p * kW + j, x + j);
    }
    done = packs * kW;
  }
  for (int64_t i = done + first; i < n; i += stride) {
    store_f32(out + i, op(load_f32(a + i), b != nullptr ? load_f32(b + i) : 0.0f));
  }
}

struct GeluOp {
  __device__ float operator()(float x, float) const {
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
  }
};
struct GeluGradOp {  // (inp, dout)
  __device__ float operator()(float x, float dout) const {
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = tanhf(u);
    const float sech2 = 1.0f - th * th;
    const float du_dx = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
    return grad * dout;
  }
};
struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct ScaleOp {
  float factor;
  __device__ float operator()(float x, float) const { return x * factor; }
};
struct CastOp {  // the conversion is the load and the store
  __device__ float operator()(float x, float) const { return x; }
};

// Launches map_kernel over n elements (packed where the pointers allow); TA defaults to TO, TB
// to TA.
template <typename TO, typename TA = TO, typename TB = TA, typename Op>
cudaError_t map(cudaStream_t s, void* out, const void* a, const void* b, int64_t n, Op op) {
  constexpr int kW = kMapPack<TO, TA, TB>;
  const bool packed = aligned16({out, a, b});
  const int64_t items = packed ? (n + kW - 1) / kW : n;
  map_kernel<TO, TA, TB, Op><<<grid_for(items, kThreads), kThreads, 0, s>>>(
      static_cast<TO*>(out), static_cast<const TA*>(a), static_cast<const TB*>(b), n, packed, op);
  return launch_result();
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
    return map<T>(s, out, inp, nullptr, n, GeluOp{});
  }
};
struct GeluBackward {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* dinp, const void* inp, const void* dout, int64_t n) {
    return map<T>(s, dinp, inp, dout, n, GeluGradOp{});
  }
};
struct Add {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* out, const void* a, const void* b, int64_t n) {
    return map<T>(s, out, a, b, n, AddOp{});
  }
};
struct Scale {
  template <typename T>
  static cudaError_t run(cudaStream_t s, void* x, float factor, int64_t n) {
    return map<T>(s, x, x, nullptr, n, ScaleOp{factor});
  }
};
// Second level of the cast dispatch: the source type is fixed to S.
template <typename S>
struct CastFrom {
  template <typename D>
  static cudaError_t run(cudaStream_t s, void* dst, const void* src, int64_t n) {
    return map<D, S>(s, dst, src, nullptr, n, CastOp{});
  }
};
// dst += src: the sum in fp32 of dst's value and src's, stored as D.
template <typename D>
struct AccumulateInto {
  template <typename S>
  static cudaError_t run(cudaStream_t s, void* dst, const void* src, int64_t n) {
    return map<D, D, S>(s, dst, dst, src, n, AddOp{});
  }
};
struct Accumulate {
  template <typename D>
  static cudaError_t run(cudaStream_t s, void* dst, const void* src, ElemType src_t, int64_t n) {
    return dispatch<AccumulateInto<D>>(src_t, s, dst, src, n);
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

cudaError_t launch_accumulate(cudaStream_t stream, void* dst, ElemType dst_t, const void* src,
                              ElemType src_t, int64_t n) {
  if (n == 0) return cudaSuccess;
  return dispatch<Accumulate>(dst_t, stream, dst, src, src_t, n);
}

}  // namespace strata::gpu::cuda
