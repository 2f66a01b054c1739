#include "gpu/cpu_device.h"

#include <unistd.h>

#include <oneapi/tbb/info.h>

#include <thread>

#include "gpu/cpu_device_impl.h"
#include "gpu/cpu_kernels.h"
#include "gpu/cpu_stream.h"

namespace strata::gpu {
namespace {

constexpr size_t kDefaultLimitBytes = size_t{1} << 30;

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

}  // namespace

Result<std::unique_ptr<Device>> create_cpu_device(const DeviceOptions& options) {
  if (options.threads < 0) {
    return make_error(ErrorCode::kConfig, "cpu device threads ", options.threads,
                      " is not accepted (0 = all cores, or a positive count)");
  }
  if (!(options.link_bytes_per_s >= 0.0)) {
    return make_error(ErrorCode::kConfig, "cpu device link rate ", options.link_bytes_per_s,
                      " bytes/s is not accepted (0 = unlimited, or a positive rate)");
  }
  const size_t limit =
      options.memory_limit_bytes == 0 ? kDefaultLimitBytes : options.memory_limit_bytes;
  STRATA_ASSIGN_OR_RETURN(auto arena, CpuArena::create(limit));
  const int threads = options.threads > 0 ? options.threads : tbb::info::default_concurrency();
  return std::unique_ptr<Device>(new CpuDevice(std::move(arena), options, threads));
}

CpuDevice::CpuDevice(std::unique_ptr<CpuArena> arena, const DeviceOptions& options, int threads)
    : memory_(std::move(arena)),
      options_(options),
      threads_(threads),
      task_arena_(threads),
      kernels_(std::make_unique<CpuKernels>(this)) {
  const auto now = std::chrono::steady_clock::now();
  link_free_at_[0] = now;
  link_free_at_[1] = now;
}

CpuDevice::~CpuDevice() = default;

std::string CpuDevice::name() const {
  return "cpu (" + std::to_string(threads_) + (threads_ == 1 ? " thread)" : " threads)");
}

MemoryInfo CpuDevice::memory_info() const {
  MemoryInfo info;
  info.limit_bytes = memory_->limit_bytes();
  info.used_bytes = memory_->used_bytes();
  info.peak_bytes = memory_->peak_bytes();
  info.physical_bytes = physical_memory_bytes();
  return info;
}

Result<DeviceBuffer> CpuDevice::allocate(size_t bytes) {
  STRATA_ASSIGN_OR_RETURN(void* p, memory_->allocate(bytes));
  if (p == nullptr) return DeviceBuffer();
  return DeviceBuffer(this, p, bytes);
}

void CpuDevice::release(void* ptr, size_t bytes) { memory_->free(ptr, bytes); }

Result<std::unique_ptr<Stream>> CpuDevice::create_stream() {
  return std::unique_ptr<Stream>(new CpuStream(this));
}

Result<std::unique_ptr<Event>> CpuDevice::create_event() {
  return std::unique_ptr<Event>(new CpuEvent());
}

Kernels& CpuDevice::kernels() { return *kernels_; }

Status CpuDevice::synchronize() {
  std::lock_guard<std::mutex> lock(streams_mu_);
  Status first;
  for (CpuStream* s : streams_) {
    Status st = s->synchronize();
    if (!st.ok() && first.ok()) first = std::move(st);
  }
  return first;
}

void CpuDevice::register_stream(CpuStream* s) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.insert(s);
}

void CpuDevice::unregister_stream(CpuStream* s) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.erase(s);
}

void CpuDevice::throttle_link(CopyKind kind, size_t bytes) {
  if (options_.link_bytes_per_s <= 0.0) return;
  if (kind != CopyKind::kHostToDevice && kind != CopyKind::kDeviceToHost) return;
  const int lane = kind == CopyKind::kHostToDevice ? 0 : 1;
  const auto duration = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(static_cast<double>(bytes) / options_.link_bytes_per_s));
  std::chrono::steady_clock::time_point done;
  {
    // The link carries one copy at a time per direction: this copy occupies it after the ones
    // already booked.
    std::lock_guard<std::mutex> lock(link_mu_);
    const auto now = std::chrono::steady_clock::now();
    const auto start = link_free_at_[lane] > now ? link_free_at_[lane] : now;
    done = start + duration;
    link_free_at_[lane] = done;
  }
  std::this_thread::sleep_until(done);
}

}  // namespace strata::gpu
