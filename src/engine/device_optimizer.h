// The optimizer state on the device (--offload-optimizer none, or the --gpu-optimizer-fraction
// share of it): a chosen set of partitions, each with its fp32 master, m and v in one device
// buffer [master | m | v], moved there from an OffloadedOptimizer (which keeps its host copy,
// the initial state) and back, and updated with Kernels::adam_step with the same constants as
// the CPU Adam (CpuAdam::constants), so the bits match on the CpuDevice.
// Used by ZeroStep (at stage 0 over one rank: the planned step). Ownership: owns the device
// buffers; borrows the optimizer and the device. Thread safety: none (update() is enqueued on the
// caller's stream).
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
  // Copies the state of the partitions `on_device` selects (by partition; empty: all) to the
  // device (synchronously, on `stream`). None of them may be on NVMe.
  static Result<DeviceOptimizer> create(OffloadedOptimizer& optimizer, gpu::Device& device,
                                        gpu::Stream& stream, std::vector<bool> on_device = {});
  // The partitions on the device: the last ones in partition order (the shared block and the
  // first layers, whose update the next forward needs first) until their share of the elements
  // reaches `fraction` (rounded to the nearest partition; 1: all, 0: none). The NVMe share takes
  // partitions from the front, so the two never overlap while their fractions add up to <= 1.
  static std::vector<bool> choose(const OffloadedOptimizer& optimizer, double fraction);
  // Copies the state back into `optimizer` (synchronously), e.g. before reading or saving it.
  Status download(OffloadedOptimizer& optimizer, gpu::Stream& stream) const;

  // Enqueues Adam on partition p: `grads` (numel of dtype, device) at Adam step `step`; writes
  // the new parameters in `dtype` to `out` (device; for fp32 the masters are copied there).
  Status update(gpu::Stream& stream, const OffloadedOptimizer& optimizer, size_t p,
                const void* grads, DType grad_dtype, void* out, DType dtype,
                const cpu::AdamStep& step);

  bool on_device(size_t p) const { return p < state_.size() && state_[p].data() != nullptr; }
  uint64_t bytes() const;

 private:
  gpu::Device* device_ = nullptr;
  std::vector<gpu::DeviceBuffer> state_;  // by partition: [master | m | v]
};

}  // namespace strata::engine
