// PlanningDevice: a Device that only accounts (the planner, --plan). It stands in for a real
// device while the engine lays out a configuration: allocate() hands out address space that no
// memory backs (reserved, inaccessible: a touch is a crash, not a silent use) and counts it, so
// that what the model and the engine would allocate is known before anything is; nothing runs
// (its streams accept work and drop it: the caller must not expect results). Its limit is the real
// device's, but allocation is not capped by it: the planner reports a plan over the limit rather
// than failing half-way.
//
// Ownership: borrows the real device (kind, name, limit, kernels), which must outlive it.
// Thread safety: allocate/release/memory_info are thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "gpu/device.h"

namespace strata::gpu {

class PlanningDevice final : public Device {
 public:
  // limit_bytes: the limit to plan against, when not the real device's (0: the real device's).
  explicit PlanningDevice(Device& real, size_t limit_bytes = 0);
  DeviceKind kind() const override { return real_.kind(); }
  std::string name() const override { return real_.name() + " (planning only)"; }
  MemoryInfo memory_info() const override;
  Result<DeviceBuffer> allocate(size_t bytes) override;
  Result<std::unique_ptr<Stream>> create_stream() override;
  Result<std::unique_ptr<Event>> create_event() override;
  Kernels& kernels() override { return real_.kernels(); }
  Status synchronize() override { return ok_status(); }

 protected:
  void release(void* ptr, size_t bytes) override;

 private:
  Device& real_;
  size_t limit_bytes_ = 0;
  mutable std::mutex mu_;
  size_t used_ = 0, peak_ = 0;
};

}  // namespace strata::gpu
