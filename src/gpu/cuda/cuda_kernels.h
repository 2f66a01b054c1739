// CudaKernels: the Kernels interface (gpu/kernels.h) on a CudaDevice. Matmul is cuBLASLt
// (cuda_matmul.cpp); every other op is LaunchKernels (argument checks at enqueue time, then the
// launch functions of kernels_*.cu) on the CudaStream. Every launch is checked.
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

#include "gpu/cuda/launch_kernels.h"

namespace strata::gpu::cuda {

class CudaDevice;
class CudaStream;

class CudaKernels final : public LaunchKernels {
 public:
  static Result<std::unique_ptr<CudaKernels>> create(const CudaDevice* device);
  ~CudaKernels() override;
  CudaKernels(const CudaKernels&) = delete;
  CudaKernels& operator=(const CudaKernels&) = delete;

  Status matmul(Stream& s, const MatmulArgs& args) override;

 private:
  CudaKernels(const CudaDevice* device, cublasLtHandle_t handle)
      : device_(device), handle_(handle) {}
  // The CudaStream behind `s`, with its device made current; kConfig for a foreign stream.
  Result<CudaStream*> cuda_stream(Stream& s) const;
  Result<LaunchTarget> prepare(Stream& s) const override;

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

}  // namespace strata::gpu::cuda
