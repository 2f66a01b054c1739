// The emulated CUDA runtime (cuda_emu.h): devices, memory, host registration, streams, events,
// host functions, copies and kernel launches.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "emu_internal.h"
#include "simt.h"

namespace cuda_emu {
namespace detail {
namespace {

constexpr size_t kAlignment = 256;                  // cudaMalloc's alignment
constexpr size_t kPoisonLimit = size_t{256} << 20;  // fresh allocations up to this are NaN-filled

struct Completion {
  bool done = false;
};

struct Device {
  size_t capacity = 0;
  size_t used = 0;
  cudaError_t sticky = cudaSuccess;
  std::string sticky_message;
  CUstream_st* legacy = nullptr;  // the legacy default stream, made on first use
};

}  // namespace
}  // namespace detail
}  // namespace cuda_emu

struct CUstream_st {
  int device = 0;
  unsigned flags = 0;
  std::deque<std::function<void()>> queue;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  bool stop = false;
  std::condition_variable cv;  // work or stop for the worker
  std::thread worker;
};

struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  std::shared_ptr<cuda_emu::detail::Completion> latest;  // of the last record, or null
};

namespace cuda_emu {
namespace detail {
namespace {

struct Allocation {
  size_t bytes;
  int device;
};
struct Registration {
  size_t bytes;
  unsigned flags;
  int device;  // current when registered (without the portable flag, only that device may use it)
};

// All of the runtime's state, under one mutex; made once and never destroyed, so that buffers
// freed by static destructors at exit still find it.
struct State {
  std::mutex mu;
  std::condition_variable done_cv;  // some stream work, or a host function, completed
  std::vector<Device> devices;
  std::map<uintptr_t, Allocation> allocations;      // device memory by base address
  std::map<uintptr_t, Registration> registrations;  // registered host memory by base address
  std::set<CUstream_st*> streams;
  std::set<CUevent_st*> events;
  std::atomic<bool> strict{true};
  // The host-function thread.
  std::deque<std::function<void()>> host_functions;
  std::condition_variable host_cv;
  bool host_thread_started = false;
  AtomicCounters counters;
};

State& state() {
  static State* s = [] {
    auto* st = new State;
    const char* n = std::getenv("STRATA_CUDA_EMU_DEVICES");
    const char* mib = std::getenv("STRATA_CUDA_EMU_MEMORY_MIB");
    const char* strict = std::getenv("STRATA_CUDA_EMU_STRICT");
    const int count = n != nullptr ? std::atoi(n) : 2;
    const size_t capacity = (mib != nullptr ? std::strtoull(mib, nullptr, 10) : 2048) << 20;
    st->devices.resize(static_cast<size_t>(std::max(count, 0)));
    for (Device& d : st->devices) d.capacity = capacity;
    st->strict = !(strict != nullptr && std::string(strict) == "0");
    return st;
  }();
  return *s;
}

struct ThreadSlot {
  cudaError_t last = cudaSuccess;
  cudaError_t message_code = cudaSuccess;
  std::string message;
  int device = 0;
  bool in_host_function = false;
};
thread_local ThreadSlot slot;

std::string hex(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

// Requires state().mu.
const Allocation* find_allocation(uintptr_t p, uintptr_t* base) {
  auto& allocs = state().allocations;
  auto it = allocs.upper_bound(p);
  if (it == allocs.begin()) return nullptr;
  --it;
  if (p >= it->first + std::max<size_t>(it->second.bytes, 1)) return nullptr;
  *base = it->first;
  return &it->second;
}

// Requires state().mu: the registration holding all of [p, p + bytes), or null.
const Registration* find_registration(uintptr_t p, size_t bytes) {
  auto& regs = state().registrations;
  auto it = regs.upper_bound(p);
  if (it == regs.begin()) return nullptr;
  --it;
  if (p + bytes > it->first + it->second.bytes) return nullptr;
  return &it->second;
}

bool valid_device(int d) { return d >= 0 && static_cast<size_t>(d) < state().devices.size(); }

void worker_loop(CUstream_st* s) {
  State& st = state();
  std::unique_lock lock(st.mu);
  for (;;) {
    s->cv.wait(lock, [s] { return s->stop || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stopped and drained
    std::function<void()> work = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    work();
    work = nullptr;
    lock.lock();
    ++s->completed;
    st.done_cv.notify_all();
  }
}

// Requires st.mu. A new stream with its worker.
CUstream_st* new_stream(int device, unsigned flags) {
  auto* s = new CUstream_st;
  s->device = device;
  s->flags = flags;
  s->worker = std::thread(worker_loop, s);
  state().streams.insert(s);
  return s;
}

// Requires the lock: waits until the work enqueued on `s` so far has completed.
void drain(std::unique_lock<std::mutex>& lock, CUstream_st* s) {
  const uint64_t ticket = s->enqueued;
  state().done_cv.wait(lock, [s, ticket] { return s->completed >= ticket; });
}

// Requires the lock: the stream a handle names (null: the current device's legacy stream), or
// null when it is not a live stream.
CUstream_st* resolve(cudaStream_t stream) {
  State& st = state();
  if (stream == nullptr) {
    Device& d = st.devices[static_cast<size_t>(slot.device)];
    if (d.legacy == nullptr) d.legacy = new_stream(slot.device, cudaStreamDefault);
    return d.legacy;
  }
  return st.streams.count(stream) != 0 ? stream : nullptr;
}

// Requires the lock. The legacy default stream and blocking streams synchronize with each other
// (CUDA's implicit synchronization): work for one of them first waits for the others' work.
void implicit_sync(std::unique_lock<std::mutex>& lock, CUstream_st* s) {
  if ((s->flags & cudaStreamNonBlocking) != 0) return;
  State& st = state();
  std::vector<CUstream_st*> others;
  for (CUstream_st* o : st.streams) {
    if (o != s && o->device == s->device && (o->flags & cudaStreamNonBlocking) == 0) {
      others.push_back(o);
    }
  }
  for (CUstream_st* o : others) drain(lock, o);
}

cudaError_t sticky_of(int device) {
  const Device& d = state().devices[static_cast<size_t>(device)];
  if (d.sticky != cudaSuccess) {
    slot.last = d.sticky;
    slot.message_code = d.sticky;
    slot.message = d.sticky_message;
  }
  return d.sticky;
}

void host_function_loop() {
  State& st = state();
  slot.in_host_function = true;
  std::unique_lock lock(st.mu);
  for (;;) {
    st.host_cv.wait(lock, [&st] { return !st.host_functions.empty(); });
    std::function<void()> fn = std::move(st.host_functions.front());
    st.host_functions.pop_front();
    lock.unlock();
    fn();
    fn = nullptr;
    lock.lock();
  }
}

bool launch_hook(const simt::Launch& l);

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    case cudaMemcpyDefault: return "Default";
  }
  return "unknown";
}

// What a copy's pointer is. Requires the lock.
struct Side {
  int device = -1;          // device memory of this device, or -1 (host)
  bool registered = false;  // host memory inside one registration usable on `for_device`
};
Side classify(const void* p, size_t bytes, int for_device, std::string* problem) {
  Side side;
  uintptr_t base = 0;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  if (const Allocation* a = find_allocation(addr, &base)) {
    if (addr + bytes > base + a->bytes) {
      *problem = "device range " + hex(p) + " + " + std::to_string(bytes) +
                 " bytes runs past its cudaMalloc of " + std::to_string(a->bytes) + " bytes";
    }
    side.device = a->device;
    return side;
  }
  if (const Registration* r = find_registration(addr, bytes)) {
    side.registered = (r->flags & cudaHostRegisterPortable) != 0 || r->device == for_device;
  }
  return side;
}

}  // namespace

cudaError_t fail(cudaError_t err, const std::string& message) {
  slot.last = err;
  slot.message_code = err;
  slot.message = message;
  return err;
}

cudaError_t enter(const char* api) {
  (void)state();
  if (slot.in_host_function) {
    return fail(cudaErrorNotPermitted,
                std::string(api) +
                    " called from a host function (cudaLaunchHostFunc): CUDA forbids CUDA calls "
                    "there");
  }
  return cudaSuccess;
}

int current_device() { return slot.device; }

int device_of(const void* p, size_t bytes) {
  std::lock_guard lock(state().mu);
  uintptr_t base = 0;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const Allocation* a = find_allocation(addr, &base);
  if (a == nullptr || addr + bytes > base + std::max<size_t>(a->bytes, 1)) return -1;
  return a->device;
}

int stream_device(cudaStream_t stream) {
  std::lock_guard lock(state().mu);
  if (stream == nullptr) return slot.device;
  return state().streams.count(stream) != 0 ? stream->device : -1;
}

cudaError_t enqueue(cudaStream_t stream, std::function<void()> work, const char* api) {
  State& st = state();
  std::unique_lock lock(st.mu);
  CUstream_st* s = resolve(stream);
  if (s == nullptr) {
    return fail(cudaErrorInvalidResourceHandle,
                std::string(api) + ": stream " + hex(stream) + " is not a live stream");
  }
  if (sticky_of(s->device) != cudaSuccess) return st.devices[size_t(s->device)].sticky;
  implicit_sync(lock, s);
  s->queue.push_back(std::move(work));
  ++s->enqueued;
  s->cv.notify_one();
  return cudaSuccess;
}

void set_sticky(int device, cudaError_t err, const std::string& message) {
  std::lock_guard lock(state().mu);
  Device& d = state().devices[static_cast<size_t>(device)];
  if (d.sticky == cudaSuccess) {
    d.sticky = err;
    d.sticky_message = message;
    std::fprintf(stderr, "cuda_emu: device %d: %s\n", device, message.c_str());
  }
}

AtomicCounters& counters() { return state().counters; }

namespace {

// STRATA_CUDA_EMU_PROFILE=1: at exit, the emulated time of each kernel (by address and block
// size; `nm -C` on the binary names the address), for finding what makes a test slow.
bool profiling() {
  static const bool on = [] {
    const char* v = std::getenv("STRATA_CUDA_EMU_PROFILE");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}
struct Profile {
  std::mutex mu;
  std::map<std::pair<uintptr_t, unsigned>, std::pair<uint64_t, double>> by_kernel;
};
Profile& the_profile() {
  static Profile* p = new Profile;  // read by the exit handler, never destroyed
  return *p;
}
void print_profile() {
  Profile& p = the_profile();
  std::lock_guard lock(p.mu);
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [key, v] : p.by_kernel) {
    std::ostringstream os;
    os << std::hex << key.first << std::dec << " block " << key.second << ": " << v.first
       << " launches";
    rows.emplace_back(v.second, os.str());
  }
  std::sort(rows.rbegin(), rows.rend());
  for (const auto& [seconds, what] : rows) {
    std::fprintf(stderr, "cuda_emu profile: %8.3f s  %s\n", seconds, what.c_str());
  }
}
void profile(const simt::Launch& l, double seconds) {
  static const int registered = std::atexit(print_profile);
  (void)registered;
  Profile& p = the_profile();
  std::lock_guard lock(p.mu);
  auto& v = p.by_kernel[{l.kernel, l.config.block.x * l.config.block.y * l.config.block.z}];
  v.first++;
  v.second += seconds;
}

bool launch_hook(const simt::Launch& l) {
  if (l.config.stream == nullptr) return false;  // the SIMT device's launches: run at once
  if (enter("kernel launch") != cudaSuccess) {
    l.destroy(l.context);
    return true;
  }
  const int device = stream_device(l.config.stream);
  if (device != slot.device) {
    fail(cudaErrorInvalidResourceHandle,
         device < 0 ? "kernel launch on " + hex(l.config.stream) + ", which is not a live stream"
                    : "kernel launch on a stream of device " + std::to_string(device) +
                          " while device " + std::to_string(slot.device) + " is current");
    l.destroy(l.context);
    return true;
  }
  if (simt::check_launch(l.config, l.kernel) != cudaSuccess) {  // recorded by the emulator
    l.destroy(l.context);
    return true;
  }
  const simt::Launch copy = l;
  const cudaError_t err = enqueue(
      l.config.stream,
      [copy, device] {
        const bool timed = profiling();
        const auto t0 =
            timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        simt::run_grid(copy.config, copy.kernel, copy.body, copy.context);
        if (timed) {
          profile(copy,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        copy.destroy(copy.context);
        std::string message;
        const int fault = simt::take_last_error(message);
        counters().launches++;
        if (fault != cudaSuccess) {
          set_sticky(device, cudaErrorLaunchFailure, "kernel fault: " + message);
        }
      },
      "kernel launch");
  if (err != cudaSuccess) l.destroy(l.context);
  return true;
}

struct HookInstaller {
  HookInstaller() { simt::set_launch_hook(launch_hook); }
} install_hook;

}  // namespace
}  // namespace detail

void set_strict(bool strict) { detail::state().strict = strict; }
bool strict() { return detail::state().strict; }
Counters counters() {
  auto& c = detail::counters();
  Counters out;
  out.launches = c.launches;
  out.async_copies = c.async_copies;
  out.pageable_copies = c.pageable_copies;
  out.host_functions = c.host_functions;
  out.matmuls = c.matmuls;
  out.heuristics = c.heuristics;
  out.collectives = c.collectives;
  out.set_device_calls = c.set_device_calls;
  return out;
}

}  // namespace cuda_emu

using namespace cuda_emu::detail;

#define STRATA_EMU_ENTER(api)                                            \
  do {                                                                   \
    if (const cudaError_t e_ = enter(api); e_ != cudaSuccess) return e_; \
  } while (0)

// ---- devices ----

cudaError_t cudaGetDeviceCount(int* count) {
  STRATA_EMU_ENTER("cudaGetDeviceCount");
  if (count == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null count");
  *count = static_cast<int>(state().devices.size());
  if (*count == 0) return fail(cudaErrorNoDevice, "no emulated device (STRATA_CUDA_EMU_DEVICES=0)");
  return cudaSuccess;
}

// An emulated device sits on no PCI bus of this machine: its id names a bus that sysfs does
// not have (so its NUMA node reads as unknown).
cudaError_t cudaDeviceGetPCIBusId(char* pci_bus_id, int len, int device) {
  STRATA_EMU_ENTER("cudaDeviceGetPCIBusId");
  if (pci_bus_id == nullptr || len < 13) {
    return fail(cudaErrorInvalidValue, "cudaDeviceGetPCIBusId: buffer too small");
  }
  if (!valid_device(device)) {
    return fail(cudaErrorInvalidDevice, "cudaDeviceGetPCIBusId(" + std::to_string(device) + ")");
  }
  std::snprintf(pci_bus_id, static_cast<size_t>(len), "0000:e%x:00.0", device & 0xf);
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  STRATA_EMU_ENTER("cudaSetDevice");
  counters().set_device_calls++;
  if (!valid_device(device)) {
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) +
                                            "): " + std::to_string(state().devices.size()) +
                                            " emulated devices");
  }
  slot.device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  STRATA_EMU_ENTER("cudaGetDevice");
  if (device == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDevice: null pointer");
  *device = slot.device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  STRATA_EMU_ENTER("cudaGetDeviceProperties");
  if (prop == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null prop");
  if (!valid_device(device)) {
    return fail(cudaErrorInvalidDevice,
                "cudaGetDeviceProperties: no device " + std::to_string(device));
  }
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "strata emulated GPU %d", device);
  prop->totalGlobalMem = state().devices[static_cast<size_t>(device)].capacity;
  prop->sharedMemPerBlock = size_t{48} << 10;
  prop->sharedMemPerBlockOptin = size_t{227} << 10;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->unifiedAddressing = 1;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  STRATA_EMU_ENTER("cudaMemGetInfo");
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return fail(cudaErrorInvalidValue, "cudaMemGetInfo: null pointer");
  }
  std::lock_guard lock(state().mu);
  const Device& d = state().devices[static_cast<size_t>(slot.device)];
  *free_bytes = d.capacity - d.used;
  *total_bytes = d.capacity;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  STRATA_EMU_ENTER("cudaDeviceSynchronize");
  State& st = state();
  std::unique_lock lock(st.mu);
  std::vector<CUstream_st*> mine;
  for (CUstream_st* s : st.streams) {
    if (s->device == slot.device) mine.push_back(s);
  }
  for (CUstream_st* s : mine) drain(lock, s);
  return sticky_of(slot.device);
}

// ---- memory ----

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  STRATA_EMU_ENTER("cudaMalloc");
  if (ptr == nullptr) return fail(cudaErrorInvalidValue, "cudaMalloc: null pointer");
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  State& st = state();
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  {
    std::lock_guard lock(st.mu);
    Device& d = st.devices[static_cast<size_t>(slot.device)];
    if (rounded > d.capacity - d.used) {
      return fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) +
                                                 " bytes: " + std::to_string(d.capacity - d.used) +
                                                 " bytes free on emulated device " +
                                                 std::to_string(slot.device));
    }
    d.used += rounded;
  }
  void* p = ::operator new (rounded, std::align_val_t{kAlignment}, std::nothrow);
  std::lock_guard lock(st.mu);
  if (p == nullptr) {
    st.devices[static_cast<size_t>(slot.device)].used -= rounded;
    return fail(cudaErrorMemoryAllocation, "cudaMalloc: the host has no memory for the emulation");
  }
  // Fresh device memory is not zeroed on a GPU: NaN bytes show a read before the first write.
  if (rounded <= kPoisonLimit) std::memset(p, 0xff, rounded);
  st.allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{rounded, slot.device};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  STRATA_EMU_ENTER("cudaFree");
  if (ptr == nullptr) return cudaSuccess;
  // cudaFree synchronizes the device first.
  const int device_before = slot.device;
  State& st = state();
  int device = -1;
  size_t bytes = 0;
  {
    std::lock_guard lock(st.mu);
    auto it = st.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == st.allocations.end()) {
      return fail(cudaErrorInvalidValue,
                  "cudaFree(" + hex(ptr) + "): not the start of a cudaMalloc allocation");
    }
    device = it->second.device;
    bytes = it->second.bytes;
  }
  slot.device = device;
  (void)cudaDeviceSynchronize();
  slot.device = device_before;
  std::lock_guard lock(st.mu);
  st.allocations.erase(reinterpret_cast<uintptr_t>(ptr));
  st.devices[static_cast<size_t>(device)].used -= bytes;
  ::operator delete (ptr, std::align_val_t{kAlignment});
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned int flags) {
  STRATA_EMU_ENTER("cudaHostRegister");
  if (ptr == nullptr || bytes == 0 || (flags & ~3u) != 0) {
    return fail(cudaErrorInvalidValue, "cudaHostRegister(" + hex(ptr) + ", " +
                                           std::to_string(bytes) + ", flags " +
                                           std::to_string(flags) + "): invalid arguments");
  }
  State& st = state();
  std::lock_guard lock(st.mu);
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  uintptr_t base = 0;
  if (find_allocation(addr, &base) != nullptr) {
    return fail(cudaErrorInvalidValue, "cudaHostRegister of device memory " + hex(ptr));
  }
  auto next = st.registrations.lower_bound(addr);
  const bool overlaps_next = next != st.registrations.end() && next->first < addr + bytes;
  bool overlaps_prev = false;
  if (next != st.registrations.begin()) {
    auto prev = std::prev(next);
    overlaps_prev = prev->first + prev->second.bytes > addr;
  }
  if (overlaps_next || overlaps_prev) {
    return fail(cudaErrorHostMemoryAlreadyRegistered, "cudaHostRegister(" + hex(ptr) + ", " +
                                                          std::to_string(bytes) +
                                                          "): overlaps memory already registered");
  }
  st.registrations[addr] = Registration{bytes, flags, slot.device};
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  STRATA_EMU_ENTER("cudaHostUnregister");
  State& st = state();
  std::lock_guard lock(st.mu);
  if (st.registrations.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) {
    return fail(cudaErrorHostMemoryNotRegistered,
                "cudaHostUnregister(" + hex(ptr) + "): not the start of a registered range");
  }
  return cudaSuccess;
}

cudaError_t cudaHostGetFlags(unsigned int* flags, void* host_ptr) {
  STRATA_EMU_ENTER("cudaHostGetFlags");
  if (flags == nullptr) return fail(cudaErrorInvalidValue, "cudaHostGetFlags: null flags");
  std::lock_guard lock(state().mu);
  const Registration* r = find_registration(reinterpret_cast<uintptr_t>(host_ptr), 1);
  if (r == nullptr) {
    return fail(cudaErrorInvalidValue,
                "cudaHostGetFlags(" + hex(host_ptr) + "): not registered host memory");
  }
  // With unified addressing, registered memory is also mapped.
  *flags = r->flags | cudaHostRegisterMapped;
  return cudaSuccess;
}

// ---- copies ----

namespace {

// Checks a copy and says how to run it: the device pointer's sides, pageable host memory.
cudaError_t check_copy(const char* api, void* dst, const void* src, size_t bytes,
                       cudaMemcpyKind kind, int stream_dev, bool* pageable) {
  std::string problem;
  std::lock_guard lock(state().mu);
  const Side d = classify(dst, bytes, stream_dev, &problem);
  const Side s = classify(src, bytes, stream_dev, &problem);
  if (!problem.empty()) return fail(cudaErrorInvalidValue, std::string(api) + ": " + problem);
  const bool want_dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault &&
      ((d.device >= 0) != want_dst_dev || (s.device >= 0) != want_src_dev)) {
    return fail(cudaErrorInvalidValue,
                std::string(api) + " " + kind_name(kind) + ": the destination " + hex(dst) +
                    " is " + (d.device >= 0 ? "device" : "host") + " memory and the source " +
                    hex(src) + " is " + (s.device >= 0 ? "device" : "host") + " memory");
  }
  for (const Side* side : {&d, &s}) {
    if (side->device >= 0 && side->device != stream_dev) {
      return fail(cudaErrorInvalidValue,
                  std::string(api) + ": memory of device " + std::to_string(side->device) +
                      " on a stream of device " + std::to_string(stream_dev));
    }
  }
  *pageable = (d.device < 0 && !d.registered) || (s.device < 0 && !s.registered);
  if (d.device < 0 && s.device < 0) *pageable = !d.registered && !s.registered;
  return cudaSuccess;
}

std::string pageable_message(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                             bool dst_host) {
  return std::string("cudaMemcpyAsync ") + kind_name(kind) + " of " + std::to_string(bytes) +
         " bytes: the host " + (dst_host ? "destination " + hex(dst) : "source " + hex(src)) +
         " is pageable memory (not registered with cudaHostRegister): the copy would be staged "
         "and block the calling thread (strict mode of the emulated runtime)";
}

}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  STRATA_EMU_ENTER("cudaMemcpyAsync");
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) {
    return fail(cudaErrorInvalidValue, "cudaMemcpyAsync: null pointer");
  }
  const int dev = stream_device(stream);
  if (dev < 0) {
    return fail(cudaErrorInvalidResourceHandle,
                "cudaMemcpyAsync: " + hex(stream) + " is not a live stream");
  }
  bool pageable = false;
  if (const cudaError_t e = check_copy("cudaMemcpyAsync", dst, src, bytes, kind, dev, &pageable);
      e != cudaSuccess) {
    return e;
  }
  counters().async_copies++;
  if (pageable) {
    const bool dst_host = device_of(dst, bytes) < 0 && kind != cudaMemcpyHostToDevice;
    if (state().strict) {
      return fail(cudaErrorInvalidValue, pageable_message(dst, src, bytes, kind, dst_host));
    }
    // Pageable memory: staged by the driver, so synchronous for the host.
    counters().pageable_copies++;
    if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return e;
    std::memcpy(dst, src, bytes);
    return cudaSuccess;
  }
  return enqueue(
      stream, [dst, src, bytes] { std::memcpy(dst, src, bytes); }, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  STRATA_EMU_ENTER("cudaMemcpy");
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue, "cudaMemcpy: null");
  bool pageable = false;
  if (const cudaError_t e = check_copy("cudaMemcpy", dst, src, bytes, kind, slot.device, &pageable);
      e != cudaSuccess) {
    return e;
  }
  // On the legacy default stream: after its work and that of blocking streams, synchronous for
  // the host.
  State& st = state();
  std::unique_lock lock(st.mu);
  CUstream_st* legacy = resolve(nullptr);
  implicit_sync(lock, legacy);
  drain(lock, legacy);
  if (sticky_of(slot.device) != cudaSuccess) return st.devices[size_t(slot.device)].sticky;
  lock.unlock();
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  STRATA_EMU_ENTER("cudaMemsetAsync");
  if (bytes == 0) return cudaSuccess;
  const int dev = stream_device(stream);
  if (dev < 0) {
    return fail(cudaErrorInvalidResourceHandle,
                "cudaMemsetAsync: " + hex(stream) + " is not a live stream");
  }
  const int mem_dev = device_of(dst, bytes);
  if (mem_dev != dev) {
    return fail(cudaErrorInvalidValue,
                "cudaMemsetAsync(" + hex(dst) + ", " + std::to_string(bytes) + " bytes): " +
                    (mem_dev < 0 ? "not inside one device allocation"
                                 : "memory of device " + std::to_string(mem_dev) +
                                       " on a stream of device " + std::to_string(dev)));
  }
  return enqueue(
      stream, [dst, value, bytes] { std::memset(dst, value, bytes); }, "cudaMemsetAsync");
}

// ---- streams ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  STRATA_EMU_ENTER("cudaStreamCreateWithFlags");
  if (stream == nullptr || (flags & ~1u) != 0) {
    return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: invalid arguments");
  }
  std::lock_guard lock(state().mu);
  *stream = new_stream(slot.device, flags);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  STRATA_EMU_ENTER("cudaStreamDestroy");
  State& st = state();
  std::unique_lock lock(st.mu);
  if (stream == nullptr || st.streams.count(stream) == 0) {
    return fail(cudaErrorInvalidResourceHandle,
                "cudaStreamDestroy: " + hex(stream) + " is not a live stream");
  }
  // CUDA lets the work finish after the call returns; here the call waits for it.
  st.streams.erase(stream);
  stream->stop = true;
  stream->cv.notify_one();
  lock.unlock();
  stream->worker.join();
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  STRATA_EMU_ENTER("cudaStreamSynchronize");
  State& st = state();
  std::unique_lock lock(st.mu);
  CUstream_st* s = resolve(stream);
  if (s == nullptr) {
    return fail(cudaErrorInvalidResourceHandle,
                "cudaStreamSynchronize: " + hex(stream) + " is not a live stream");
  }
  drain(lock, s);
  return sticky_of(s->device);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  STRATA_EMU_ENTER("cudaStreamQuery");
  std::lock_guard lock(state().mu);
  CUstream_st* s = resolve(stream);
  if (s == nullptr) {
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: not a live stream");
  }
  if (sticky_of(s->device) != cudaSuccess) return state().devices[size_t(s->device)].sticky;
  if (s->completed < s->enqueued) return fail(cudaErrorNotReady, "stream work is pending");
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  STRATA_EMU_ENTER("cudaStreamWaitEvent");
  std::shared_ptr<Completion> c;
  {
    std::lock_guard lock(state().mu);
    if (flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags must be 0");
    if (state().events.count(event) == 0) {
      return fail(cudaErrorInvalidResourceHandle,
                  "cudaStreamWaitEvent: " + hex(event) + " is not a live event");
    }
    c = event->latest;  // the record current at the call; none: nothing to wait for
  }
  if (!c)
    return stream_device(stream) < 0
               ? fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: not a live stream")
               : cudaSuccess;
  return enqueue(
      stream,
      [c] {
        State& st = state();
        std::unique_lock lock(st.mu);
        st.done_cv.wait(lock, [&c] { return c->done; });
      },
      "cudaStreamWaitEvent");
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  STRATA_EMU_ENTER("cudaLaunchHostFunc");
  if (fn == nullptr) return fail(cudaErrorInvalidValue, "cudaLaunchHostFunc: null function");
  return enqueue(
      stream,
      [fn, user_data] {
        // The stream waits while its function runs on the one host-function thread.
        State& st = state();
        auto done = std::make_shared<Completion>();
        std::unique_lock lock(st.mu);
        if (!st.host_thread_started) {
          st.host_thread_started = true;
          std::thread(host_function_loop).detach();
        }
        st.host_functions.push_back([fn, user_data, done] {
          fn(user_data);
          counters().host_functions++;
          std::lock_guard l(state().mu);
          done->done = true;
          state().done_cv.notify_all();
        });
        st.host_cv.notify_one();
        st.done_cv.wait(lock, [&done] { return done->done; });
      },
      "cudaLaunchHostFunc");
}

// ---- events ----

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  STRATA_EMU_ENTER("cudaEventCreateWithFlags");
  if (event == nullptr || (flags & ~3u) != 0) {
    return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: invalid arguments");
  }
  auto* e = new CUevent_st;
  e->device = slot.device;
  e->flags = flags;
  std::lock_guard lock(state().mu);
  state().events.insert(e);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  STRATA_EMU_ENTER("cudaEventDestroy");
  std::lock_guard lock(state().mu);
  if (state().events.erase(event) == 0) {
    return fail(cudaErrorInvalidResourceHandle,
                "cudaEventDestroy: " + hex(event) + " is not a live event");
  }
  delete event;  // pending records and waits hold their own completion
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  STRATA_EMU_ENTER("cudaEventRecord");
  auto c = std::make_shared<Completion>();
  {
    std::lock_guard lock(state().mu);
    if (state().events.count(event) == 0) {
      return fail(cudaErrorInvalidResourceHandle,
                  "cudaEventRecord: " + hex(event) + " is not a live event");
    }
    CUstream_st* s = resolve(stream);
    if (s != nullptr && s->device != event->device) {
      return fail(cudaErrorInvalidResourceHandle,
                  "cudaEventRecord: an event of device " + std::to_string(event->device) +
                      " on a stream of device " + std::to_string(s->device));
    }
  }
  const cudaError_t err = enqueue(
      stream,
      [c] {
        std::lock_guard lock(state().mu);
        c->done = true;
        state().done_cv.notify_all();
      },
      "cudaEventRecord");
  if (err != cudaSuccess) return err;
  std::lock_guard lock(state().mu);
  if (state().events.count(event) != 0) event->latest = c;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  STRATA_EMU_ENTER("cudaEventQuery");
  std::lock_guard lock(state().mu);
  if (state().events.count(event) == 0) {
    return fail(cudaErrorInvalidResourceHandle,
                "cudaEventQuery: " + hex(event) + " is not a live event");
  }
  if (sticky_of(event->device) != cudaSuccess) return state().devices[size_t(event->device)].sticky;
  if (event->latest && !event->latest->done) {
    return fail(cudaErrorNotReady, "cudaEventQuery: the event's work has not completed");
  }
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  STRATA_EMU_ENTER("cudaEventSynchronize");
  State& st = state();
  std::unique_lock lock(st.mu);
  if (st.events.count(event) == 0) {
    return fail(cudaErrorInvalidResourceHandle,
                "cudaEventSynchronize: " + hex(event) + " is not a live event");
  }
  std::shared_ptr<Completion> c = event->latest;
  const int device = event->device;
  if (c) st.done_cv.wait(lock, [&c] { return c->done; });
  return sticky_of(device);
}

// ---- errors ----

cudaError_t cudaGetLastError() {
  if (slot.in_host_function) return cudaErrorNotPermitted;
  const cudaError_t sticky = state().devices.empty() ? cudaSuccess : [] {
    std::lock_guard lock(state().mu);
    return state().devices[static_cast<size_t>(slot.device)].sticky;
  }();
  std::string simt_message;
  const auto simt_err = static_cast<cudaError_t>(simt::take_last_error(simt_message));
  if (simt_err != cudaSuccess) {
    slot.message_code = simt_err;
    slot.message = simt_message;
  }
  cudaError_t err = slot.last != cudaSuccess ? slot.last : simt_err;
  slot.last = cudaSuccess;
  if (sticky != cudaSuccess) err = sticky;  // sticky errors are never cleared
  return err;
}

cudaError_t cudaPeekAtLastError() {
  const cudaError_t err = cudaGetLastError();
  slot.last = err;
  return err;
}

const char* cudaGetErrorName(cudaError_t err) { return simt::error_name(err); }

// The emulator's message of the calling thread's last failure with this code (more than CUDA's
// fixed description: it names the call and the buffer).
const char* cudaGetErrorString(cudaError_t err) {
  if (err != cudaSuccess && slot.message_code == err && !slot.message.empty()) {
    return slot.message.c_str();
  }
  return cudaGetErrorName(err);
}
