// Status adapters for cudaError_t and cublasStatus_t (see cuda_status.h).
#include "gpu/cuda/cuda_status.h"

namespace strata::gpu::cuda {

Status cuda_status(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return ok_status();
  (void)cudaGetLastError();  // reset a non-sticky error so the next call does not see it
  const ErrorCode code =
      err == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kCuda;
  return make_error(code, what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

Status cublas_status(cublasStatus_t st, std::string_view what) {
  if (st == CUBLAS_STATUS_SUCCESS) return ok_status();
  const ErrorCode code = st == CUBLAS_STATUS_ALLOC_FAILED    ? ErrorCode::kOutOfMemory
                         : st == CUBLAS_STATUS_NOT_SUPPORTED ? ErrorCode::kUnsupported
                                                             : ErrorCode::kCuda;
  return make_error(code, what, ": ", cublasLtGetStatusName(st), ": ", cublasLtGetStatusString(st));
}

}  // namespace strata::gpu::cuda
