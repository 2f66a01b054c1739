// Plain launch functions of the CUDA kernels (kernels_*.cu), called by CudaKernels
// (cuda_kernels.cpp) after it has validated the arguments. This header is shared by C++20 and
// CUDA C++17 translation units, so it includes only <cstdint> and the CUDA runtime API.
//
// Every function enqueues on `stream` and returns the launch error (cudaGetLastError after each
// launch); errors while the kernel runs surface at the next synchronize. Element types follow
// `ElemType`; all arithmetic is fp32 and 16-bit stores round to nearest even. Pointers are device
// memory. Semantics are those of the same-named ops in gpu/kernels.h.
// Thread safety: stateless; the caller orders the work through the stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::gpu::cuda {

// Same values as strata::DType (core/dtype.h), which .cu files cannot include (C++20).
enum class ElemType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// The row groups of a block of the column reductions (bias_backward, the norms' parameter
// gradients): 32 columns x kRowGroups threads, each summing every kRowGroups-th row in order.
inline constexpr int kRowGroups = 16;
// Largest head size the attention kernels support.
inline constexpr int64_t kMaxHeadSize = 256;
// Floats of per-stream scratch that sum_squares needs (partials of its first pass).
inline constexpr int64_t kSumSquaresScratchFloats = 2 * 1024;
// Floats of scratch every stream owns (4 MiB): sum_squares' partials, layernorm_backward's
// per-row-chunk partial sums of dweight and dbias (2 x chunks x C floats), embedding_backward's
// sorted (token, position) keys (8 bytes a position: up to 512K positions, B=512 at T=1024).
inline constexpr int64_t kStreamScratchFloats = 1024 * 1024;
static_assert(kStreamScratchFloats >= kSumSquaresScratchFloats);

cudaError_t launch_add_bias_rows(cudaStream_t stream, void* c, const void* bias, int64_t m,
                                 int64_t n, ElemType t);
// `scratch` holds kStreamScratchFloats floats of device memory owned by the stream (the row
// chunks' column sums, bias_backward_chunks(m, n) x n floats).
cudaError_t launch_bias_backward(cudaStream_t stream, void* dbias, const void* dout, int64_t m,
                                 int64_t n, ElemType t, bool accumulate, float* scratch);
// The row chunks of a two-pass column reduction of `rows` rows and `columns` columns with
// `per_column` floats of partial sums a column and chunk: enough blocks of 32 columns to fill an
// H100/H200 (four a multiprocessor), at least kRowGroups rows a chunk, within the stream's
// scratch; 1 when the columns alone fill the GPU. A function of its arguments only, so the
// summation order, and the bits, are the same on every run.
int column_reduction_chunks(int64_t rows, int64_t columns, int64_t per_column);
// bias_backward's: column_reduction_chunks(m, n, 1).
int bias_backward_chunks(int64_t m, int64_t n);

cudaError_t launch_embedding_forward(cudaStream_t stream, void* out, const int32_t* tokens,
                                     const void* wte, const void* wpe, int64_t B, int64_t T,
                                     int64_t C, ElemType t);
// `scratch` holds kStreamScratchFloats floats of device memory owned by the stream: the sorted
// (token, position) keys, embedding_sort_length(B*T) of 8 bytes, so B*T is at most
// kMaxEmbeddingPositions.
cudaError_t launch_embedding_backward(cudaStream_t stream, void* dwte, void* dwpe, const void* dout,
                                      const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                      ElemType t, float* scratch);
// B*T rounded up to a power of two (the bitonic sort's length).
int64_t embedding_sort_length(int64_t BT);
inline constexpr int64_t kMaxEmbeddingPositions = kStreamScratchFloats / 2;

// residual null: out = LayerNorm(a). Else residual = a + b (rounded to the storage type, what
// add() stores) and out = LayerNorm(residual), with the bits of the two launches apart.
cudaError_t launch_layernorm_forward(cudaStream_t stream, void* out, float* mean, float* rstd,
                                     void* residual, const void* a, const void* b,
                                     const void* weight, const void* bias, int64_t N, int64_t C,
                                     float eps, ElemType t);
// `scratch` holds kStreamScratchFloats floats of device memory owned by the stream.
cudaError_t launch_layernorm_backward(cudaStream_t stream, void* dinp, void* dweight, void* dbias,
                                      const void* dout, const void* inp, const void* weight,
                                      const float* mean, const float* rstd, int64_t N, int64_t C,
                                      ElemType t, float* scratch);
// How many row chunks layernorm_backward splits the parameter gradients into (1 when the
// columns alone fill the GPU or the scratch holds no more); a function of N and C only, so the
// summation order, and the bits, are the same on every run.
int layernorm_param_chunks(int64_t N, int64_t C);

// RMSNorm: the parameter gradient's chunks as layernorm_backward's (layernorm_param_chunks), in
// the same scratch.
cudaError_t launch_rmsnorm_forward(cudaStream_t stream, void* out, float* rstd, const void* inp,
                                   const void* weight, int64_t N, int64_t C, float eps, ElemType t);
cudaError_t launch_rmsnorm_backward(cudaStream_t stream, void* dinp, void* dweight,
                                    const void* dout, const void* inp, const void* weight,
                                    const float* rstd, int64_t N, int64_t C, ElemType t,
                                    float* scratch);
cudaError_t launch_rope(cudaStream_t stream, void* x, const float* inv_freq, int64_t B, int64_t T,
                        int64_t heads, int64_t HS, int64_t stride, bool inverse, ElemType t);
cudaError_t launch_swiglu_forward(cudaStream_t stream, void* out, const void* gate_up, int64_t N,
                                  int64_t H, ElemType t);
cudaError_t launch_swiglu_backward(cudaStream_t stream, void* dgate_up, const void* gate_up,
                                   const void* dout, int64_t N, int64_t H, ElemType t);

cudaError_t launch_gelu_forward(cudaStream_t stream, void* out, const void* inp, int64_t n,
                                ElemType t);
cudaError_t launch_gelu_backward(cudaStream_t stream, void* dinp, const void* inp, const void* dout,
                                 int64_t n, ElemType t);

// NKV key/value heads (grouped-query attention: kernels.h). The backward keeps each query row's
// D = dout . out in the stream's scratch (kStreamScratchFloats floats) between its two kernels
// when B * NH * T floats fit; otherwise (or with a null scratch) each kernel computes it again,
// with the same bits.
cudaError_t launch_attention_forward(cudaStream_t stream, void* out, float* lse, const void* qkv,
                                     int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                     ElemType t);
cudaError_t launch_attention_backward(cudaStream_t stream, void* dqkv, const void* dout,
                                      const void* qkv, const void* out, const float* lse, int64_t B,
                                      int64_t T, int64_t C, int64_t NH, int64_t NKV, ElemType t,
                                      float* scratch);

// The tensor-core attention kernels (kernels_attention_fwd.cu, kernels_attention_bwd.cu), which
// launch_attention_* use when attention_uses_tensor_cores: 16-bit storage, head size 32, 64 or
// 128, and the environment variable STRATA_CUDA_ATTENTION not set to "scalar".
bool attention_uses_tensor_cores(int64_t C, int64_t NH, ElemType t);
cudaError_t launch_attention_forward_tc(cudaStream_t stream, void* out, float* lse, const void* qkv,
                                        int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                        ElemType t);
cudaError_t launch_attention_backward_tc(cudaStream_t stream, void* dqkv, const void* dout,
                                         const void* qkv, const void* out, const float* lse,
                                         int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                         ElemType t, float* scratch);

cudaError_t launch_add(cudaStream_t stream, void* out, const void* a, const void* b, int64_t n,
                       ElemType t);
cudaError_t launch_scale(cudaStream_t stream, void* x, float factor, int64_t n, ElemType t);

// cpu::AdamConstants (cpu/cpu_adam.h), which .cu files cannot include (C++20).
struct AdamKernelConstants {
  float grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, inv_sqrt_bc2,
      eps, l2, decay;
  bool l2_decay, decoupled_decay;
};
// Adam on fp32 params/m/v from grads of grad_t; with has_out16, the new params as out_t too.
cudaError_t launch_adam(cudaStream_t stream, float* params, float* m, float* v, const void* grads,
                        ElemType grad_t, void* out16, ElemType out_t, bool has_out16, int64_t n,
                        const AdamKernelConstants& k);
cudaError_t launch_cast(cudaStream_t stream, void* dst, ElemType dst_t, const void* src,
                        ElemType src_t, int64_t n);
// dst += src, the sum in fp32 rounded to dst_t.
cudaError_t launch_accumulate(cudaStream_t stream, void* dst, ElemType dst_t, const void* src,
                              ElemType src_t, int64_t n);

// A target outside [0, V) other than a negative one gives a NaN loss (and no one-hot term).
cudaError_t launch_softmax_cross_entropy(cudaStream_t stream, float* losses, void* logits,
                                         const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                                         float dloss, ElemType t);

// `scratch` holds kSumSquaresScratchFloats floats of device memory owned by the stream.
cudaError_t launch_sum_squares(cudaStream_t stream, float* out, const void* x, int64_t n,
                               ElemType t, bool accumulate, float* scratch);

// Kernels::grad_stats: the chunk of cpu::grad_check (cpu::kGradCheckChunk, which .cu files
// cannot include), and the most elements one call takes (a chunk's fp64 sum in the stream's
// scratch).
inline constexpr int64_t kGradCheckChunk = int64_t{1} << 16;
inline constexpr int64_t kGradStatsMaxElements = kStreamScratchFloats / 2 * kGradCheckChunk;
cudaError_t launch_grad_stats(cudaStream_t stream, double* out, const void* x, int64_t n,
                              ElemType t, float* scratch);

}  // namespace strata::gpu::cuda
