// CudaDevice, CudaStream, CudaEvent and the backend entry points (see cuda_device.h).
#include "gpu/cuda/cuda_device.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "core/log.h"
#include "cpu/pinned_registry.h"
#include "gpu/cuda/cuda_backend.h"
#include "gpu/cuda/cuda_kernels.h"
#include "gpu/cuda/cuda_status.h"
#include "gpu/cuda/launch.h"
#include "gpu/pool_size.h"

namespace strata::gpu::cuda {
namespace {

constexpr size_t kMaxWorkspaceBytes = size_t{32} << 20;

cudaMemcpyKind memcpy_kind(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice: return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost: return cudaMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice: return cudaMemcpyDeviceToDevice;
    case CopyKind::kHostToHost: return cudaMemcpyHostToHost;
  }
  return cudaMemcpyDefault;
}

// Runs and frees the std::function handed to cudaLaunchHostFunc.
void CUDART_CB run_host_callback(void* arg) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
  try {
    (*fn)();
  } catch (const std::exception& e) {
    STRATA_LOG(kError, "CUDA stream host callback threw: " << e.what());
  } catch (...) {
    STRATA_LOG(kError, "CUDA stream host callback threw a non-standard exception");
  }
}

}  // namespace

int device_count() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not an error for the caller
    return 0;
  }
  return std::max(count, 0);
}

std::string pci_bus_id(int ordinal) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof(id)), ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  std::string s(id);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Result<std::unique_ptr<Device>> create_cuda_device(const DeviceOptions& options) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device, CudaDevice::create(options));
  return std::unique_ptr<Device>(std::move(device));
}

// ---- CudaDevice ----

// Every pinned buffer of the process, made before or after, registered with the driver
// (portable: for every GPU of the process) while it lives (cpu/pinned_registry.h), once per
// process: the first CudaDevice installs the hook and it stays (buffers may outlive devices).
// The hook runs on whichever thread allocates or frees a buffer: it makes the first device's
// GPU current there, so that a thread that never chose one does not open a context on GPU 0
// (with one GPU per rank, each rank would otherwise take memory on rank 0's GPU).
Status register_pinned_memory(int ordinal) {
  static std::once_flag once;
  static Status installed;
  std::call_once(once, [ordinal] {
    cpu::PinnedHook hook;
    hook.name = "CUDA";
    hook.attach = [ordinal](void* data, size_t bytes) {
      STRATA_RETURN_IF_ERROR(cuda_status(cudaSetDevice(ordinal), "cudaSetDevice"));
      return cuda_status(cudaHostRegister(data, bytes, cudaHostRegisterPortable),
                         "cudaHostRegister");
    };
    hook.detach = [ordinal](void* data, size_t) {
      (void)cudaSetDevice(ordinal);
      (void)cudaHostUnregister(data);
      (void)cudaGetLastError();  // at exit the runtime may be gone: nothing to report
    };
    installed = cpu::install_pinned_hook(std::move(hook));
  });
  return installed;
}

Result<std::unique_ptr<CudaDevice>> CudaDevice::create(const DeviceOptions& options) {
  const int count = device_count();
  if (options.ordinal < 0 || options.ordinal >= count) {
    return make_error(ErrorCode::kConfig, "GPU ordinal ", options.ordinal,
                      " is not accepted: this machine has ", count, " CUDA GPU(s)");
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.ordinal));
  cudaDeviceProp prop{};
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options.ordinal));
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  size_t limit = options.memory_limit_bytes;
  if (limit == 0) {
    STRATA_ASSIGN_OR_RETURN(
        limit, default_pool_bytes(free_bytes, total_bytes, options.sharing, options.ordinal));
  }
  limit = limit / OffsetArena::kAlignment * OffsetArena::kAlignment;
  if (limit == 0) {
    return make_error(ErrorCode::kConfig, "GPU memory limit ", options.memory_limit_bytes,
                      " bytes is below the ", OffsetArena::kAlignment, "-byte minimum");
  }
  void* base = nullptr;
  const char* memcheck_env = std::getenv("STRATA_CUDA_MEMCHECK");
  const bool memcheck = memcheck_env != nullptr && std::string(memcheck_env) == "1";
  const cudaError_t err = memcheck ? cudaSuccess : cudaMalloc(&base, limit);
  if (err != cudaSuccess) {
    return cuda_status(err, "cudaMalloc of the device pool")
        .with_context("GPU memory limit " + std::to_string(limit) + " bytes, " +
                      std::to_string(free_bytes) + " bytes free");
  }
  std::string name = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                     std::to_string(prop.minor) + ")";
  std::unique_ptr<CudaDevice> device(
      new CudaDevice(options.ordinal, std::move(name), total_bytes, base, limit));
  device->memcheck_ = memcheck;
  if (memcheck)
    STRATA_LOG(kInfo, "GPU " << options.ordinal << ": memcheck mode, a cudaMalloc a buffer");
  STRATA_ASSIGN_OR_RETURN(device->kernels_, CudaKernels::create(device.get()));
  STRATA_RETURN_IF_ERROR(register_pinned_memory(options.ordinal));
  return device;
}

CudaDevice::CudaDevice(int ordinal, std::string name, size_t physical_bytes, void* base,
                       size_t limit_bytes)
    : ordinal_(ordinal),
      name_(std::move(name)),
      physical_bytes_(physical_bytes),
      base_(base),
      arena_(limit_bytes),
      workspace_bytes_(std::min(kMaxWorkspaceBytes, limit_bytes / 64 / OffsetArena::kAlignment *
                                                        OffsetArena::kAlignment)) {}

CudaDevice::~CudaDevice() {
  (void)cudaSetDevice(ordinal_);
  (void)cudaDeviceSynchronize();
  kernels_.reset();
  (void)cudaFree(base_);
  (void)cudaGetLastError();
}

Status CudaDevice::activate() const {
  // Only when the calling thread's device is another: cudaGetDevice reads the thread's state,
  // where cudaSetDevice on every launch and copy costs a call into the runtime each time.
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == ordinal_) return ok_status();
  return cuda_status(cudaSetDevice(ordinal_), "cudaSetDevice");
}

MemoryInfo CudaDevice::memory_info() const {
  MemoryInfo info;
  info.limit_bytes = arena_.capacity_bytes();
  info.used_bytes = arena_.used_bytes();
  info.peak_bytes = arena_.peak_bytes();
  info.physical_bytes = physical_bytes_;
  return info;
}

Result<DeviceBuffer> CudaDevice::allocate(size_t bytes) {
  const std::optional<size_t> offset = arena_.allocate(bytes);
  if (!offset) {
    const size_t used = arena_.used_bytes();
    const size_t limit = arena_.capacity_bytes();
    if (OffsetArena::round_up(bytes) != 0 && OffsetArena::round_up(bytes) <= limit - used) {
      return make_error(ErrorCode::kOutOfMemory, "GPU memory: cannot allocate ", bytes,
                        " bytes: ", used, " bytes in use of the ", limit,
                        "-byte limit, but the largest free block is ", arena_.largest_free_bytes(),
                        " bytes (fragmented)");
    }
    return make_error(ErrorCode::kOutOfMemory, "GPU memory: cannot allocate ", bytes,
                      " bytes: ", used, " bytes in use of the ", limit, "-byte limit");
  }
  if (memcheck_) {  // its own allocation of exactly `bytes`; the arena only counts
    if (Status st = activate(); !st.ok()) {
      arena_.free(*offset);
      return st;
    }
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (err != cudaSuccess) {
      arena_.free(*offset);
      return cuda_status(err, "cudaMalloc (memcheck mode)");
    }
    std::lock_guard lock(memcheck_mu_);
    memcheck_offsets_[p] = *offset;
    return DeviceBuffer(this, p, bytes);
  }
  return DeviceBuffer(this, static_cast<char*>(base_) + *offset, bytes);
}

void CudaDevice::release(void* ptr, size_t /*bytes*/) {
  if (memcheck_) {
    std::lock_guard lock(memcheck_mu_);
    const auto it = memcheck_offsets_.find(ptr);
    if (it == memcheck_offsets_.end()) {
      STRATA_LOG(kError, "GPU " << ordinal_
                                << ": memcheck mode: release of a pointer it did not "
                                   "hand out");
      return;
    }
    (void)activate();
    (void)cudaFree(ptr);
    arena_.free(it->second);
    memcheck_offsets_.erase(it);
    return;
  }
  arena_.free(static_cast<size_t>(static_cast<char*>(ptr) - static_cast<char*>(base_)));
}

Result<std::unique_ptr<Stream>> CudaDevice::create_stream() {
  STRATA_RETURN_IF_ERROR(activate());
  STRATA_ASSIGN_OR_RETURN(DeviceBuffer workspace, allocate(workspace_bytes_));
  STRATA_ASSIGN_OR_RETURN(DeviceBuffer scratch,
                          allocate(sizeof(float) * size_t{kStreamScratchFloats}));
  cudaStream_t stream = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return std::unique_ptr<Stream>(
      new CudaStream(this, stream, std::move(workspace), std::move(scratch)));
}

Result<std::unique_ptr<Event>> CudaDevice::create_event() {
  STRATA_RETURN_IF_ERROR(activate());
  cudaEvent_t event = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return std::unique_ptr<Event>(new CudaEvent(this, event));
}

Kernels& CudaDevice::kernels() { return *kernels_; }

Status CudaDevice::synchronize() {
  STRATA_RETURN_IF_ERROR(activate());
  return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// ---- CudaEvent ----

CudaEvent::~CudaEvent() {
  (void)device_->activate();
  (void)cudaEventDestroy(event_);
}

bool CudaEvent::query() {
  (void)device_->activate();
  const cudaError_t err = cudaEventQuery(event_);
  // Not ready is no error, and synchronize() reports real ones: keep either out of the next
  // launch's cudaGetLastError.
  if (err != cudaSuccess) (void)cudaGetLastError();
  return err != cudaErrorNotReady;
}

Status CudaEvent::synchronize() {
  STRATA_RETURN_IF_ERROR(device_->activate());
  return cuda_status(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

// ---- CudaStream ----

CudaStream::~CudaStream() {
  // The workspace and scratch go back to the pool after this body: wait for kernels using them.
  (void)device_->activate();
  (void)cudaStreamSynchronize(stream_);
  (void)cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

Status CudaStream::copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return ok_status();
  if (dst == nullptr || src == nullptr) {
    return make_error(ErrorCode::kConfig, "stream copy of ", bytes, " bytes with a null pointer");
  }
  STRATA_RETURN_IF_ERROR(device_->activate());
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, memcpy_kind(kind), stream_),
                     "cudaMemcpyAsync");
}

Status CudaStream::copy_now(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return ok_status();
  if (dst == nullptr || src == nullptr) {
    return make_error(ErrorCode::kConfig, "stream copy of ", bytes, " bytes with a null pointer");
  }
  STRATA_RETURN_IF_ERROR(device_->activate());
  STRATA_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  STRATA_RETURN_IF_ERROR(cuda_status(cudaMemcpy(dst, src, bytes, memcpy_kind(kind)), "cudaMemcpy"));
  // From pageable memory cudaMemcpy may return before the DMA has finished: wait for it, since
  // this stream does not synchronize with the legacy default stream it ran on.
  return cuda_status(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
}

Status CudaStream::memset(void* dst, int value, size_t bytes) {
  if (bytes == 0) return ok_status();
  if (dst == nullptr) {
    return make_error(ErrorCode::kConfig, "stream memset of ", bytes, " bytes of a null pointer");
  }
  STRATA_RETURN_IF_ERROR(device_->activate());
  return cuda_status(cudaMemsetAsync(dst, value, bytes, stream_), "cudaMemsetAsync");
}

Status CudaStream::record(Event& event) {
  auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
  if (cuda_event == nullptr) {
    return make_error(ErrorCode::kConfig, "a CUDA stream can record only a CUDA event");
  }
  STRATA_RETURN_IF_ERROR(device_->activate());
  return cuda_status(cudaEventRecord(cuda_event->handle(), stream_), "cudaEventRecord");
}

Status CudaStream::wait(Event& event) {
  auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
  if (cuda_event == nullptr) {
    return make_error(ErrorCode::kConfig, "a CUDA stream can wait only for a CUDA event");
  }
  STRATA_RETURN_IF_ERROR(device_->activate());
  return cuda_status(cudaStreamWaitEvent(stream_, cuda_event->handle(), 0), "cudaStreamWaitEvent");
}

Status CudaStream::host_callback(std::function<void()> fn) {
  if (!fn) return make_error(ErrorCode::kConfig, "stream host_callback with an empty function");
  STRATA_RETURN_IF_ERROR(device_->activate());
  auto* heap_fn = new std::function<void()>(std::move(fn));
  const cudaError_t err = cudaLaunchHostFunc(stream_, run_host_callback, heap_fn);
  if (err != cudaSuccess) {
    delete heap_fn;  // never enqueued
    return cuda_status(err, "cudaLaunchHostFunc");
  }
  return ok_status();
}

Status CudaStream::synchronize() {
  STRATA_RETURN_IF_ERROR(device_->activate());
  return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace strata::gpu::cuda
