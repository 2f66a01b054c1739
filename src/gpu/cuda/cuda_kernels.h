// CudaKernels: the Kernels interface (gpu/kernels.h) on a CudaDevice. Matmul is cuBLASLt
// (cuda_matmul.cpp); every other op is LaunchKernels (argument checks at enqueue time, then the
// launch functions of kernels_*.cu) on the CudaStream. Every launch is checked.
//
// Ownership: owned by its CudaDevice; holds the cuBLASLt handle and a cache of each matmul's
// descriptors and algorithm (per stream, shape and epilogue). Scratch memory (cuBLASLt workspace,
// reduction partials) belongs to the stream, so ops on different streams never share it. Thread
// safety: all methods may be called concurrently for different streams (the algorithm cache has a
// mutex; a cached descriptor is one stream's); a stream from one thread at a time.
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

// Owners of cuBLASLt's descriptors.
struct LtDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { (void)cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const { (void)cublasLtMatrixLayoutDestroy(d); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const {
    (void)cublasLtMatmulPreferenceDestroy(d);
  }
};
using LtMatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDeleter>;
using LtLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtDeleter>;
using LtPreference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtDeleter>;

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

  // One matmul's cuBLASLt objects, made once (plan()): its descriptor (transposes, epilogue,
  // aux leading dimension), layouts and algorithm; usable is false when cuBLASLt has no
  // algorithm with the epilogue.
  struct Plan {
    LtMatmulDesc desc;
    LtLayout first, second, result;
    cublasLtMatmulAlgo_t algo{};
    bool usable = false;
  };
  // The stream (a plan's descriptor takes each call's pointers, so it is one stream's), shape,
  // dtypes, the operands' common alignment, cuBLASLt's epilogue, the bias' and aux's alignments.
  using PlanKey = std::tuple<const CudaStream*, int64_t, int64_t, int64_t, bool, bool, int, int,
                             uint32_t, uint32_t, uint32_t, uint32_t>;
  Result<Plan*> plan(const PlanKey& key, const MatmulArgs& args, uint32_t epilogue, uint32_t align,
                     CudaStream* cs);
  static Status set_pointers(Plan& p, const MatmulArgs& args);

  const CudaDevice* device_;
  cublasLtHandle_t handle_;
  std::mutex plans_mu_;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace strata::gpu::cuda
