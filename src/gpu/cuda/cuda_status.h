// The adapters from the CUDA runtime and cuBLASLt error spaces to Status (DESIGN.md §6).
// cudaErrorMemoryAllocation maps to kOutOfMemory, everything else to kCuda.
// Thread safety: stateless.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string_view>

#include "core/status.h"

namespace strata::gpu::cuda {

// ok for cudaSuccess, else "<what>: <cudaErrorName>: <description>". Clears the runtime's
// last-error state of non-sticky errors so they are not reported twice.
Status cuda_status(cudaError_t err, std::string_view what);
// ok for CUBLAS_STATUS_SUCCESS, else "<what>: <status name>: <description>".
Status cublas_status(cublasStatus_t st, std::string_view what);

}  // namespace strata::gpu::cuda

// Returns from the enclosing function when the CUDA runtime call fails.
#define STRATA_CUDA_RETURN_IF_ERROR(call) \
  STRATA_RETURN_IF_ERROR(::strata::gpu::cuda::cuda_status((call), #call))
#define STRATA_CUBLAS_RETURN_IF_ERROR(call) \
  STRATA_RETURN_IF_ERROR(::strata::gpu::cuda::cublas_status((call), #call))
