// Entry points of the CUDA backend, called only by gpu/registry.cpp (and CUDA-only tests).
// This header includes no CUDA headers.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "gpu/device.h"

namespace strata::gpu::cuda {

// Number of usable GPUs; 0 when there is no driver or no device (never fails).
int device_count();
// The PCI bus id of GPU `ordinal` ("0000:3b:00.0", lower case), or "" when it cannot be read.
std::string pci_bus_id(int ordinal);
Result<std::unique_ptr<Device>> create_cuda_device(const DeviceOptions& options);

}  // namespace strata::gpu::cuda
