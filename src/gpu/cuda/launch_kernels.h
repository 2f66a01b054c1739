// LaunchKernels: every Kernels op except matmul (gpu/kernels.h), as argument checks at enqueue
// time (Status) followed by the plain launch functions of launch.h (kernels_*.cu). CudaKernels
// derives from it and supplies the CUDA stream and matmul; the tests' SIMT emulator
// (tests/gpu_simt) derives from it too and runs the same checks and kernels on CPU threads, so
// this file includes nothing of CUDA beyond launch.h.
//
// Ownership: holds nothing. Thread safety: as the derived class's prepare(); the checks are
// stateless.
#pragma once

#include "gpu/cuda/launch.h"
#include "gpu/kernels.h"

namespace strata::gpu::cuda {

class LaunchKernels : public Kernels {
 public:
  Status bias_backward(Stream& s, void* dbias, const void* dout, int64_t m, int64_t n, DType dtype,
                       bool accumulate) override;
  Status embedding_forward(Stream& s, void* out, const int32_t* tokens, const void* wte,
                           const void* wpe, int64_t B, int64_t T, int64_t C, DType dtype) override;
  Status embedding_backward(Stream& s, void* dwte, void* dwpe, const void* dout,
                            const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                            DType dtype) override;
  Status layernorm_forward(Stream& s, void* out, float* mean, float* rstd, const void* inp,
                           const void* weight, const void* bias, int64_t N, int64_t C, float eps,
                           DType dtype) override;
  Status residual_layernorm_forward(Stream& s, void* residual, void* out, float* mean, float* rstd,
                                    const void* a, const void* b, const void* weight,
                                    const void* bias, int64_t N, int64_t C, float eps,
                                    DType dtype) override;
  Status layernorm_backward(Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                            const void* inp, const void* weight, const float* mean,
                            const float* rstd, int64_t N, int64_t C, DType dtype) override;
  Status rmsnorm_forward(Stream& s, void* out, float* rstd, const void* inp, const void* weight,
                         int64_t N, int64_t C, float eps, DType dtype) override;
  Status rmsnorm_backward(Stream& s, void* dinp, void* dweight, const void* dout, const void* inp,
                          const void* weight, const float* rstd, int64_t N, int64_t C,
                          DType dtype) override;
  Status rope(Stream& s, void* x, const float* inv_freq, int64_t B, int64_t T, int64_t heads,
              int64_t HS, int64_t stride, bool inverse, DType dtype) override;
  Status swiglu_forward(Stream& s, void* out, const void* gate_up, int64_t N, int64_t H,
                        DType dtype) override;
  Status swiglu_backward(Stream& s, void* dgate_up, const void* gate_up, const void* dout,
                         int64_t N, int64_t H, DType dtype) override;
  Status gelu_forward(Stream& s, void* out, const void* inp, int64_t n, DType dtype) override;
  Status gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t n,
                       DType dtype) override;
  Status attention_forward(Stream& s, void* out, float* lse, const void* qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH, int64_t NKV, DType dtype) override;
  Status attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv,
                            const void* out, const float* lse, int64_t B, int64_t T, int64_t C,
                            int64_t NH, int64_t NKV, DType dtype) override;
  Status add(Stream& s, void* out, const void* a, const void* b, int64_t n, DType dtype) override;
  Status scale(Stream& s, void* x, float factor, int64_t n, DType dtype) override;
  Status adam_step(Stream& s, const AdamArgs& args) override;
  Status cast(Stream& s, void* dst, DType dst_dtype, const void* src, DType src_dtype,
              int64_t n) override;
  Status accumulate(Stream& s, void* dst, DType dst_dtype, const void* src, DType src_dtype,
                    int64_t n) override;
  Status softmax_cross_entropy(Stream& s, float* losses, void* logits, const int32_t* targets,
                               int64_t N, int64_t V, int64_t Vp, float dloss, DType dtype) override;
  Status sum_squares(Stream& s, float* out, const void* x, int64_t n, DType dtype,
                     bool accumulate) override;
  Status grad_stats(Stream& s, double* out, const void* x, int64_t n, DType dtype) override;

 protected:
  // matmul's argument checks (dtypes, C's dtype, positive sizes, non-null pointers, the
  // epilogue's).
  static Status check_matmul(const MatmulArgs& args);
  // Whether cuBLASLt can take the matmul's epilogue (the GELU ones store aux with a leading
  // dimension that must be a multiple of 8 elements: N here); otherwise matmul_in_sequence.
  static constexpr int64_t kEpilogueAuxLdMultiple = 8;
  static bool epilogue_fuses(const MatmulArgs& args);
  // Where an op is launched: the stream, and its kStreamScratchFloats floats of scratch.
  struct LaunchTarget {
    cudaStream_t stream = nullptr;
    float* scratch = nullptr;
  };
  // The target behind `s`, ready for launches (device current); kConfig for a foreign stream.
  virtual Result<LaunchTarget> prepare(Stream& s) const = 0;
};

// True for the storage types the kernels take (f32, f16, bf16).
inline bool valid_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}
// ElemType of a DType.
inline ElemType elem_type(DType t) { return static_cast<ElemType>(static_cast<int>(t)); }

}  // namespace strata::gpu::cuda
