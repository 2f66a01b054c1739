// The accelerator interface (DESIGN.md §3): Device, Stream, Event and device memory.
// CudaDevice maps it onto CUDA; CpuDevice plays the same role with CPU cores (a capped arena
// for memory, a worker thread per stream, real completion events).
//
// Ownership: a Device owns its memory pool, kernels and (through unique_ptr handed to callers)
// nothing else; Streams, Events and DeviceBuffers must be destroyed before their Device.
// Thread safety: Device::allocate/free/memory_info are thread-safe. A Stream may be used from one
// host thread at a time. Event::query/synchronize are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace strata::gpu {

enum class DeviceKind { kCpu, kCuda };
std::string_view device_kind_name(DeviceKind kind);  // "cpu", "cuda"
// Accepts "cpu", "cuda", "auto" (cuda when a GPU is present, else cpu).
Result<DeviceKind> parse_device_kind(std::string_view name);

struct MemoryInfo {
  size_t limit_bytes = 0;     // the cap of the device pool (--gpu-memory-limit)
  size_t used_bytes = 0;      // currently allocated from the pool
  size_t peak_bytes = 0;      // high-water mark of used_bytes
  size_t physical_bytes = 0;  // total memory of the hardware (host RAM for CpuDevice)
};

class Device;

// Device memory from a Device's capped pool. Move-only; returns its bytes to the pool when
// destroyed. Not thread-safe (own it from one place).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device* owner, void* ptr, size_t size_bytes)
      : owner_(owner), ptr_(ptr), size_bytes_(size_bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      swap(other);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t size_bytes() const { return size_bytes_; }
  bool empty() const { return ptr_ == nullptr; }
  void reset();

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(owner_, o.owner_);
    std::swap(ptr_, o.ptr_);
    std::swap(size_bytes_, o.size_bytes_);
  }
  Device* owner_ = nullptr;
  void* ptr_ = nullptr;
  size_t size_bytes_ = 0;
};

// A completion point recorded on a Stream.
class Event {
 public:
  virtual ~Event() = default;
  // True when all work enqueued before the last record() has completed (true if never recorded).
  virtual bool query() = 0;
  // Blocks the calling host thread until then; returns the first error of that work, if any.
  virtual Status synchronize() = 0;
};

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };

// An in-order queue of work. Every call enqueues and returns at once; errors of enqueued work
// are reported by the next synchronize() (of the stream or of an event recorded after it).
class Stream {
 public:
  virtual ~Stream() = default;
  // Host memory of an enqueued copy must be pinned (cpu/pinned_memory.h) on a GPU: a pageable
  // buffer is staged by the driver and blocks the calling thread (the emulated CUDA runtime's
  // strict mode refuses it).
  virtual Status copy(void* dst, const void* src, size_t bytes, CopyKind kind) = 0;
  // A copy the caller waits for, after the stream's earlier work (set-up, checkpoints, reading
  // results back): returns when the bytes have arrived, with the first error of that work. Host
  // memory may be pageable here.
  virtual Status copy_now(void* dst, const void* src, size_t bytes, CopyKind kind) {
    STRATA_RETURN_IF_ERROR(copy(dst, src, bytes, kind));
    return synchronize();
  }
  virtual Status memset(void* dst, int value, size_t bytes) = 0;
  virtual Status record(Event& event) = 0;
  // Work enqueued after this call starts only after `event`'s recorded work has completed.
  virtual Status wait(Event& event) = 0;
  // Runs `fn` on a host thread when the stream reaches this point; fn must not call stream APIs.
  virtual Status host_callback(std::function<void()> fn) = 0;
  // Blocks until all enqueued work has completed; returns the first error of that work.
  virtual Status synchronize() = 0;
  // The backend's own handle of this stream (CUDA: its cudaStream_t), for a library that enqueues
  // work on a stream itself (NCCL); null where there is none (CpuStream).
  virtual void* native_handle() { return nullptr; }
};

class Kernels;

struct DeviceOptions {
  // Cap of the device memory pool. 0 means: CpuDevice 1 GiB; CudaDevice free memory less 1 GiB,
  // at most a fair share of the GPU when `sharing` ranks use it (pool_size.h).
  size_t memory_limit_bytes = 0;
  int ordinal = 0;                // which GPU (CudaDevice)
  int sharing = 1;                // CudaDevice: ranks of this machine on the same GPU
  double link_bytes_per_s = 0.0;  // CpuDevice: host<->device copy rate cap, 0 = unlimited
  int threads = 0;                // CpuDevice: kernel threads, 0 = all cores
};

class Device {
 public:
  virtual ~Device() = default;
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;  // "cpu (2 threads)", "NVIDIA H200 (sm_90)"
  virtual MemoryInfo memory_info() const = 0;
  // 256-byte aligned memory from the capped pool. Over the cap: kOutOfMemory naming the
  // requested bytes, the bytes in use and the limit.
  virtual Result<DeviceBuffer> allocate(size_t bytes) = 0;
  virtual Result<std::unique_ptr<Stream>> create_stream() = 0;
  virtual Result<std::unique_ptr<Event>> create_event() = 0;
  virtual Kernels& kernels() = 0;
  // Blocks until all streams of this device are idle.
  virtual Status synchronize() = 0;

 protected:
  friend class DeviceBuffer;
  virtual void release(void* ptr, size_t bytes) = 0;
};

inline void DeviceBuffer::reset() {
  if (owner_ != nullptr && ptr_ != nullptr) owner_->release(ptr_, size_bytes_);
  owner_ = nullptr;
  ptr_ = nullptr;
  size_bytes_ = 0;
}

// Number of usable CUDA GPUs; never fails (no driver or no CUDA build -> 0).
int cuda_device_count();
// The PCI bus id of CUDA GPU `ordinal` ("0000:3b:00.0"), "" when unknown or no CUDA build.
std::string cuda_pci_bus_id(int ordinal);
// Creates a device of the given kind; kCuda without a CUDA build or GPU is kUnsupported.
Result<std::unique_ptr<Device>> create_device(DeviceKind kind, const DeviceOptions& options = {});
// A CudaDevice when a GPU is present, else a CpuDevice.
Result<std::unique_ptr<Device>> create_default_device(const DeviceOptions& options = {});

}  // namespace strata::gpu
