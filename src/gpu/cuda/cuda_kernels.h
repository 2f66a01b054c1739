// CudaKernels: the Kernels interface (gpu/kernels.h) on a CudaDevice. Validates arguments at
// enqueue time (Status), then calls the launch functions of launch.h (kernels_*.cu) or cuBLASLt
// (cuda_matmul.cpp) on the CudaStream. Every launch is checked.
//
// Ownership: owned by its CudaDevice; holds the cuBLASLt handle and a cache of the algorithm
// chosen for each matmul shape. Scratch memory (cuBLASLt workspace, reduction partials) belongs
// to the stream, so ops on different streams never share it.
// Thread safety: all methods may be called concurrently for different streams (the algorithm
// cache has a mutex); a stream from one thread at a time.
#pragma once

#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "gpu/cuda/launch.h"
#include "gpu/kernels.h"

namespace strata::gpu::cuda {

class CudaDevice;
class CudaStream;

class CudaKernels final : public Kernels {
 public:
  static Result<std::unique_ptr<CudaKernels>> create(const CudaDevice* device);
  ~CudaKernels() override;
  CudaKernels(const CudaKernels&) = delete;
  CudaKernels& operator=(const CudaKernels&) = delete;

  Status matmul(Stream& s, const MatmulArgs& args) override;
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
  Status layernorm_backward(Stream& s, void* dinp, void* dweight, void* dbias, const void* dout,
                            const void* inp, const void* weight, const float* mean,
                            const float* rstd, int64_t N, int64_t C, DType dtype) override;
  Status gelu_forward(Stream& s, void* out, const void* inp, int64_t n, DType dtype) override;
  Status gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t n,
                       DType dtype) override;
  Status attention_forward(Stream& s, void* out, float* lse, const void* qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH, DType dtype) override;
  Status attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv,
                            const void* out, const float* lse, int64_t B, int64_t T, int64_t C,
                            int64_t NH, DType dtype) override;
  Status add(Stream& s, void* out, const void* a, const void* b, int64_t n, DType dtype) override;
  Status scale(Stream& s, void* x, float factor, int64_t n, DType dtype) override;
  Status cast(Stream& s, void* dst, DType dst_dtype, const void* src, DType src_dtype,
              int64_t n) override;
  Status softmax_cross_entropy(Stream& s, float* losses, void* logits, const int32_t* targets,
                               int64_t N, int64_t V, int64_t Vp, float dloss, DType dtype) override;
  Status sum_squares(Stream& s, float* out, const void* x, int64_t n, DType dtype,
                     bool accumulate) override;

 private:
  CudaKernels(const CudaDevice* device, cublasLtHandle_t handle)
      : device_(device), handle_(handle) {}
  // The CudaStream behind `s`, with its device made current; kConfig for a foreign stream.
  Result<CudaStream*> prepare(Stream& s) const;

  // Shape and pointer alignments of a matmul (the key of the algorithm cache).
  using MatmulKey = std::tuple<int64_t, int64_t, int64_t, bool, bool, int, int, int>;
  Result<cublasLtMatmulAlgo_t> find_algo(const MatmulKey& key, cublasLtMatmulDesc_t op,
                                         cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                         cublasLtMatrixLayout_t c, size_t workspace_bytes,
                                         uint32_t align_bytes);

  const CudaDevice* device_;
  cublasLtHandle_t handle_;
  std::mutex algo_mu_;
  std::map<MatmulKey, cublasLtMatmulAlgo_t> algos_;
};

// ElemType of a DType.
inline ElemType elem_type(DType t) { return static_cast<ElemType>(static_cast<int>(t)); }

}  // namespace strata::gpu::cuda
