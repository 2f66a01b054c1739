// CpuDevice: the accelerator role played by CPU cores (DESIGN.md §3). Not a mock: memory is a
// capped arena, each stream a worker thread running its queue in order, events real completion
// points, kernels on the oneTBB arena with OpenBLAS (single-threaded inside TBB tasks) for matmul,
// and host<->device copies optionally held to a link bandwidth so overlap can be measured.
#pragma once

#include <memory>

#include "core/status.h"
#include "gpu/device.h"

namespace strata::gpu {

Result<std::unique_ptr<Device>> create_cpu_device(const DeviceOptions& options);

}  // namespace strata::gpu
