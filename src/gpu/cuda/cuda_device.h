// CudaDevice, CudaStream and CudaEvent: the Device interface (gpu/device.h) on one CUDA GPU.
//
// Memory: one cudaMalloc of the whole pool at creation (the limit from DeviceOptions, or free
// memory less 1 GiB), carved by an OffsetArena; no cudaMalloc afterwards. Each stream takes a
// cuBLASLt workspace and a small reduction scratch from the pool when it is created, so that
// kernels on different streams never share scratch memory.
// Streams are cudaStreamNonBlocking; events are cudaEventDisableTiming.
//
// Ownership: the device owns the pool, the cuBLASLt handle and its CudaKernels. Streams, events
// and buffers must be destroyed before the device. A stream's destructor waits for its work.
// Thread safety: as gpu/device.h (allocate/free/memory_info thread-safe; a stream from one
// thread at a time). Every public call makes the device's GPU current on the calling thread.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "gpu/cuda/offset_arena.h"
#include "gpu/device.h"

namespace strata::gpu::cuda {

class CudaKernels;

class CudaDevice final : public Device {
 public:
  static Result<std::unique_ptr<CudaDevice>> create(const DeviceOptions& options);
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string name() const override { return name_; }
  MemoryInfo memory_info() const override;
  Result<DeviceBuffer> allocate(size_t bytes) override;
  Result<std::unique_ptr<Stream>> create_stream() override;
  Result<std::unique_ptr<Event>> create_event() override;
  Kernels& kernels() override;
  Status synchronize() override;

  int ordinal() const { return ordinal_; }
  // Makes this device's GPU current on the calling thread.
  Status activate() const;
  // Bytes of cuBLASLt workspace each stream owns.
  size_t workspace_bytes() const { return workspace_bytes_; }

 protected:
  void release(void* ptr, size_t bytes) override;

 private:
  CudaDevice(int ordinal, std::string name, size_t physical_bytes, void* base, size_t limit_bytes);

  int ordinal_;
  std::string name_;
  size_t physical_bytes_;
  void* base_;  // the one cudaMalloc of the pool (null in memcheck mode)
  OffsetArena arena_;
  // STRATA_CUDA_MEMCHECK=1: every allocation is a cudaMalloc of exactly its size (the pool is
  // only counted, not allocated), so that compute-sanitizer's memcheck sees a step past one
  // allocation into the next: every tensor of the kernel tests; in a training step the plan's
  // buffers are slices of one allocation still. For checks only: slower.
  bool memcheck_ = false;
  std::mutex memcheck_mu_;
  std::unordered_map<void*, size_t> memcheck_offsets_;  // buffer -> its offset in the count
  size_t workspace_bytes_;
  std::unique_ptr<CudaKernels> kernels_;
};

class CudaEvent final : public Event {
 public:
  CudaEvent(const CudaDevice* device, cudaEvent_t event) : device_(device), event_(event) {}
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  bool query() override;
  Status synchronize() override;
  cudaEvent_t handle() const { return event_; }

 private:
  const CudaDevice* device_;
  cudaEvent_t event_;
};

class CudaStream final : public Stream {
 public:
  CudaStream(const CudaDevice* device, cudaStream_t stream, DeviceBuffer workspace,
             DeviceBuffer scratch)
      : device_(device),
        stream_(stream),
        workspace_(std::move(workspace)),
        scratch_(std::move(scratch)) {}
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Status copy(void* dst, const void* src, size_t bytes, CopyKind kind) override;
  // The stream's work first, then a synchronous cudaMemcpy (which may stage pageable memory).
  Status copy_now(void* dst, const void* src, size_t bytes, CopyKind kind) override;
  Status memset(void* dst, int value, size_t bytes) override;
  Status record(Event& event) override;
  Status wait(Event& event) override;
  Status host_callback(std::function<void()> fn) override;
  Status synchronize() override;
  void* native_handle() override { return stream_; }

  const CudaDevice* device() const { return device_; }
  cudaStream_t handle() const { return stream_; }
  void* workspace() const { return workspace_.data(); }
  size_t workspace_bytes() const { return workspace_.size_bytes(); }
  // kSumSquaresScratchFloats floats (launch.h).
  float* scratch() const { return scratch_.as<float>(); }

 private:
  const CudaDevice* device_;
  cudaStream_t stream_;
  DeviceBuffer workspace_;
  DeviceBuffer scratch_;
};

}  // namespace strata::gpu::cuda
