// The Status adapter for cudaError_t (see cuda_status.h).
#include "gpu/cuda/cuda_status.h"

namespace strata::gpu::cuda {

Status cuda_status(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return ok_status();
  (void)cudaGetLastError();  // reset a non-sticky error so the next call does not see it
  const ErrorCode code =
      err == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kCuda;
  return make_error(code, what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

}  // namespace strata::gpu::cuda
