// The adapter from the CUDA runtime's error space to Status (DESIGN.md §6); cuBLASLt's is in
// cublas_status.h. cudaErrorMemoryAllocation maps to kOutOfMemory, everything else to kCuda.
// Thread safety: stateless.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "core/status.h"

namespace strata::gpu::cuda {

// ok for cudaSuccess, else "<what>: <cudaErrorName>: <description>". Clears the runtime's
// last-error state of non-sticky errors so they are not reported twice.
Status cuda_status(cudaError_t err, std::string_view what);

}  // namespace strata::gpu::cuda

// Returns from the enclosing function when the CUDA runtime call fails.
#define STRATA_CUDA_RETURN_IF_ERROR(call) \
  STRATA_RETURN_IF_ERROR(::strata::gpu::cuda::cuda_status((call), #call))
