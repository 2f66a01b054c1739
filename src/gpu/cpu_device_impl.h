// CpuDevice: the class behind create_cpu_device (DESIGN.md §3). Internal to src/gpu.
// Ownership: owns the memory arena, the oneTBB task_arena its kernels run on, and the kernels.
// Streams and events it creates are owned by the caller and must be destroyed before it.
// Thread safety: allocate/release/memory_info/synchronize and the stream registry are
// thread-safe; the link throttle is shared by all streams (one host->device and one
// device->host link, each serialising the copies that go its way, like a PCIe link).
//
// Cores have one owner: kernels run inside `arena()` (DeviceOptions.threads threads, or all
// cores); OpenBLAS is set to one thread and called from TBB tasks over fixed row blocks, so the
// BLAS never starts a second thread pool on the same cores.
#pragma once

#include <oneapi/tbb/task_arena.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <set>

#include "gpu/cpu_arena.h"
#include "gpu/device.h"

namespace strata::gpu {

class CpuStream;
class CpuKernels;

class CpuDevice final : public Device {
 public:
  CpuDevice(std::unique_ptr<CpuArena> arena, const DeviceOptions& options, int threads);
  ~CpuDevice() override;

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string name() const override;
  MemoryInfo memory_info() const override;
  Result<DeviceBuffer> allocate(size_t bytes) override;
  Result<std::unique_ptr<Stream>> create_stream() override;
  Result<std::unique_ptr<Event>> create_event() override;
  Kernels& kernels() override;
  Status synchronize() override;

  int threads() const { return threads_; }
  tbb::task_arena& arena() { return task_arena_; }
  const CpuArena& memory() const { return *memory_; }

  // Called by the stream worker for a host<->device copy of `bytes`: blocks the caller until the
  // link (of that direction) would have carried the bytes at link_bytes_per_s. No-op if unlimited.
  void throttle_link(CopyKind kind, size_t bytes);

  void register_stream(CpuStream* s);
  void unregister_stream(CpuStream* s);

 protected:
  void release(void* ptr, size_t bytes) override;

 private:
  std::unique_ptr<CpuArena> memory_;
  DeviceOptions options_;
  int threads_;
  tbb::task_arena task_arena_;
  std::unique_ptr<CpuKernels> kernels_;
  std::mutex streams_mu_;
  std::set<CpuStream*> streams_;
  std::mutex link_mu_;
  std::chrono::steady_clock::time_point link_free_at_[2];  // h2d, d2h
};

}  // namespace strata::gpu
