// Entry points of the CUDA backend, called only by gpu/registry.cpp (and CUDA-only tests).
// This header includes no CUDA headers.
#pragma once

#include <memory>

#include "core/status.h"
#include "gpu/device.h"

namespace strata::gpu::cuda {

// Number of usable GPUs; 0 when there is no driver or no device (never fails).
int device_count();
Result<std::unique_ptr<Device>> create_cuda_device(const DeviceOptions& options);

}  // namespace strata::gpu::cuda
