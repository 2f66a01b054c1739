// The optimizer state on the device (--offload-optimizer none): each partition's fp32 master, m
// and v in one device buffer [master | m | v], moved there from an OffloadedOptimizer (which
// keeps its host copy, the initial state) and back, and updated with Kernels::adam_step with
// the same constants as the CPU Adam (CpuAdam::constants), so the bits match on the CpuDevice.
// Shared by PlannedStep and ZeroStep. Ownership: owns the device buffers; borrows the optimizer
// and the device. Thread safety: none (update() is enqueued on the caller's stream).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "cpu/cpu_adam.h"
#include "engine/offloaded_optimizer.h"
#include "gpu/device.h"

namespace strata::engine {

class DeviceOptimizer {
 public:
  // Copies every partition's state to the device (synchronously, on `stream`). The optimizer
  // must have no NVMe share.
  static Result<DeviceOptimizer> create(OffloadedOptimizer& optimizer, gpu::Device& device,
                                        gpu::Stream& stream);
  // Copies the state back into `optimizer` (synchronously), e.g. before reading or saving it.
  Status download(OffloadedOptimizer& optimizer, gpu::Stream& stream) const;

  // Enqueues Adam on partition p: `grads` (numel of dtype, device) at Adam step `step`; writes
  // the new parameters in `dtype` to `out` (device; for fp32 the masters are copied there).
  Status update(gpu::Stream& stream, const OffloadedOptimizer& optimizer, size_t p,
                const void* grads, void* out, DType dtype, const cpu::AdamStep& step);

  size_t num_partitions() const { return state_.size(); }
  uint64_t bytes() const;

 private:
  gpu::Device* device_ = nullptr;
  std::vector<gpu::DeviceBuffer> state_;  // by partition: [master | m | v]
};

}  // namespace strata::engine
