#include "gpu/planning_device.h"

#include <sys/mman.h>

#include <algorithm>

namespace strata::gpu {

namespace {

// Accepts work and does none of it (the model's creation zeroes its gradients, for one).
class NullStream final : public Stream {
 public:
  Status copy(void*, const void*, size_t, CopyKind) override { return ok_status(); }
  Status memset(void*, int, size_t) override { return ok_status(); }
  Status record(Event&) override { return ok_status(); }
  Status wait(Event&) override { return ok_status(); }
  Status host_callback(std::function<void()>) override { return ok_status(); }
  Status synchronize() override { return ok_status(); }
};

class NullEvent final : public Event {
 public:
  bool query() override { return true; }
  Status synchronize() override { return ok_status(); }
};

}  // namespace

PlanningDevice::PlanningDevice(Device& real, size_t limit_bytes)
    : real_(real), limit_bytes_(limit_bytes) {}

MemoryInfo PlanningDevice::memory_info() const {
  MemoryInfo info = real_.memory_info();
  if (limit_bytes_ > 0) info.limit_bytes = limit_bytes_;
  std::lock_guard<std::mutex> lock(mu_);
  info.used_bytes = used_;
  info.peak_bytes = peak_;
  return info;
}

Result<DeviceBuffer> PlanningDevice::allocate(size_t bytes) {
  // Rounded as the real pools round (256 bytes); the mapping itself is whole pages.
  const size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
  void* p = mmap(nullptr, rounded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return make_error(ErrorCode::kOutOfMemory, "planning device: cannot reserve ", rounded,
                      " bytes of address space");
  }
  std::lock_guard<std::mutex> lock(mu_);
  used_ += rounded;
  peak_ = std::max(peak_, used_);
  return DeviceBuffer(this, p, bytes);
}

void PlanningDevice::release(void* ptr, size_t bytes) {
  const size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
  munmap(ptr, rounded);
  std::lock_guard<std::mutex> lock(mu_);
  used_ -= rounded;
}

Result<std::unique_ptr<Stream>> PlanningDevice::create_stream() {
  return std::unique_ptr<Stream>(new NullStream());
}

Result<std::unique_ptr<Event>> PlanningDevice::create_event() {
  return std::unique_ptr<Event>(new NullEvent());
}

}  // namespace strata::gpu
