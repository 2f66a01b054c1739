// The adapter from cuBLASLt's error space to Status (DESIGN.md §6): CUBLAS_STATUS_ALLOC_FAILED
// maps to kOutOfMemory, CUBLAS_STATUS_NOT_SUPPORTED to kUnsupported, everything else to kCuda.
// Thread safety: stateless.
#pragma once

#include <cublasLt.h>

#include <string_view>

#include "core/status.h"

namespace strata::gpu::cuda {

// ok for CUBLAS_STATUS_SUCCESS, else "<what>: <status name>: <description>".
Status cublas_status(cublasStatus_t st, std::string_view what);

}  // namespace strata::gpu::cuda

// Returns from the enclosing function when the cuBLASLt call fails.
#define STRATA_CUBLAS_RETURN_IF_ERROR(call) \
  STRATA_RETURN_IF_ERROR(::strata::gpu::cuda::cublas_status((call), #call))
