// The Status adapter for cublasStatus_t (see cublas_status.h).
#include "gpu/cuda/cublas_status.h"

namespace strata::gpu::cuda {

Status cublas_status(cublasStatus_t st, std::string_view what) {
  if (st == CUBLAS_STATUS_SUCCESS) return ok_status();
  const ErrorCode code = st == CUBLAS_STATUS_ALLOC_FAILED    ? ErrorCode::kOutOfMemory
                         : st == CUBLAS_STATUS_NOT_SUPPORTED ? ErrorCode::kUnsupported
                                                             : ErrorCode::kCuda;
  return make_error(code, what, ": ", cublasLtGetStatusName(st), ": ", cublasLtGetStatusString(st));
}

}  // namespace strata::gpu::cuda
