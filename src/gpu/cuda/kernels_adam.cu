// The CUDA Adam kernel behind Kernels::adam_step: cpu_adam_simd.h's per-element operations with
// the same constants (cpu::CpuAdam::constants) in the same order, each one IEEE-rounded fp32
// operation: fmaf is one fused multiply-add, and no expression here has a separate multiply
// feeding an add, so nvcc's contraction cannot change a rounding. 16-bit copies round to nearest
// even, as the CPU's.
#include <cmath>

#include "gpu/cuda/common.cuh"

namespace strata::gpu::cuda {
namespace {

constexpr int kThreads = 256;

template <typename G, typename O, bool kOut>
__global__ void adam_kernel(float* p, float* m, float* v, const G* g, O* out16, int64_t n,
                            AdamKernelConstants k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float gv = load_f32(g + i) * k.grad_scale;
    float pv = p[i];
    if (k.l2_decay) gv = fmaf(k.l2, pv, gv);
    const float mv = fmaf(k.beta1, m[i], k.one_minus_beta1 * gv);
    const float vv = fmaf(k.beta2, v[i], (k.one_minus_beta2 * gv) * gv);
    const float d = fmaf(sqrtf(vv), k.inv_sqrt_bc2, k.eps);
    if (k.decoupled_decay) pv = pv * k.decay;
    pv = fmaf(k.neg_step_size, mv / d, pv);
    p[i] = pv;
    m[i] = mv;
    v[i] = vv;
    if (kOut) store_f32(out16 + i, pv);
  }
}

struct Adam {
  template <typename G>
  static cudaError_t run(cudaStream_t s, float* p, float* m, float* v, const void* grads,
                         void* out16, ElemType out_t, bool has_out16, int64_t n,
                         const AdamKernelConstants& k) {
    const unsigned grid = grid_for(n, kThreads);
    const G* g = static_cast<const G*>(grads);
    if (!has_out16) {
      adam_kernel<G, float, false><<<grid, kThreads, 0, s>>>(p, m, v, g, nullptr, n, k);
    } else if (out_t == ElemType::kF16) {
      adam_kernel<G, __half, true>
          <<<grid, kThreads, 0, s>>>(p, m, v, g, static_cast<__half*>(out16), n, k);
    } else {
      adam_kernel<G, __nv_bfloat16, true>
          <<<grid, kThreads, 0, s>>>(p, m, v, g, static_cast<__nv_bfloat16*>(out16), n, k);
    }
    return launch_result();
  }
};

}  // namespace

cudaError_t launch_adam(cudaStream_t stream, float* params, float* m, float* v, const void* grads,
                        ElemType grad_t, void* out16, ElemType out_t, bool has_out16, int64_t n,
                        const AdamKernelConstants& k) {
  if (n == 0) return cudaSuccess;
  return dispatch<Adam>(grad_t, stream, params, m, v, grads, out16, out_t, has_out16, n, k);
}

}  // namespace strata::gpu::cuda
