// Fused softmax + cross-entropy: one block per row of logits [N, Vp]. Two passes over the row:
// an online pass (each thread keeps its running maximum and its sum of exponentials rescaled to
// it as the maximum grows), the threads' maxima and rescaled sums combined with fixed-order block
// reductions; then the gradient write. The row is read twice and written once (it was read three
// times: maximum, sum, gradient). All in fp32.
#include "gpu/cuda/common.cuh"

namespace strata::gpu::cuda {
namespace {

constexpr int kThreads = 512;

template <typename T>
__global__ void softmax_cross_entropy_kernel(float* losses, T* logits, const int32_t* targets,
                                             int64_t V, int64_t Vp, float dloss) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  T* x = logits + row * Vp;
  const int32_t target = targets[row];
  if (target < 0) {  // ignored row: loss 0 and gradient 0 (the whole block takes this branch)
    for (int64_t i = threadIdx.x; i < Vp; i += blockDim.x) store_f32(x + i, 0.0f);
    if (threadIdx.x == 0) losses[row] = 0.0f;
    return;
  }
  float own_max = -INFINITY, own_sum = 0.0f;  // own_sum: sum of exp(x - own_max)
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = load_f32(x + i);
    if (v > own_max) {
      own_sum = own_sum * expf(own_max - v) + 1.0f;
      own_max = v;
    } else {
      own_sum += expf(v - own_max);
    }
  }
  const float mx = block_max(own_max, shared);
  // A thread that saw no element (or only -inf) adds nothing.
  const float sum = block_sum(own_max == -INFINITY ? 0.0f : own_sum * expf(own_max - mx), shared);
  const float log_sum = logf(sum);
  const bool valid = target < V;
  if (threadIdx.x == 0) {
    // Read the target logit before any thread overwrites the row (the barrier below orders it).
    losses[row] = valid ? log_sum + mx - load_f32(x + target) : NAN;
  }
  __syncthreads();
  const float inv_sum = 1.0f / sum;
  for (int64_t i = threadIdx.x; i < Vp; i += blockDim.x) {
    float g = 0.0f;
    if (i < V) {
      const float p = expf(load_f32(x + i) - mx) * inv_sum;
      g = (p - (valid && i == target ? 1.0f : 0.0f)) * dloss;
    }
    store_f32(x + i, g);
  }
}

struct SoftmaxCrossEntropy {
  template <typename T>
  static cudaError_t run(cudaStream_t s, float* losses, void* logits, const int32_t* targets,
                         int64_t N, int64_t V, int64_t Vp, float dloss) {
    softmax_cross_entropy_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, s>>>(
        losses, static_cast<T*>(logits), targets, V, Vp, dloss);
    return launch_result();
  }
};

}  // namespace

cudaError_t launch_softmax_cross_entropy(cudaStream_t stream, float* losses, void* logits,
                                         const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                                         float dloss, ElemType t) {
  if (N == 0) return cudaSuccess;
  return dispatch<SoftmaxCrossEntropy>(t, stream, losses, logits, targets, N, V, Vp, dloss);
}

}  // namespace strata::gpu::cuda
