// A Device whose kernels are the CUDA backend's (src/gpu/cuda: LaunchKernels and kernels_*.cu)
// run by the SIMT emulator (simt.h), for the conformance tests on machines without a GPU. Memory,
// streams, events and matmul are those of a CpuDevice it owns (cuBLASLt cannot be emulated);
// each other op synchronizes the stream it is given, then runs its CUDA kernels at once on the
// calling thread, in the thread order `order` (see simt.h on finding races).
#pragma once

#include <memory>

#include "core/status.h"
#include "gpu/device.h"
#include "simt.h"

namespace strata::gpu::test {

Result<std::unique_ptr<Device>> create_simt_device(const DeviceOptions& options,
                                                   simt::Order order = simt::Order::kForward);

}  // namespace strata::gpu::test
