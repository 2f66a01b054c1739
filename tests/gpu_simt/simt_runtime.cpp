// The SIMT emulator's runtime (simt.h): per-OS-thread executor, fibers on ucontext, barriers,
// warp shuffles, launch limits and the CUDA runtime calls of simt_cuda.h.
#include <pthread.h>
#include <ucontext.h>

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "simt.h"
#include "simt_cuda.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define STRATA_SIMT_ASAN 1
#else
#define STRATA_SIMT_ASAN 0
#endif

namespace simt {
namespace {

constexpr size_t kStackBytes = size_t{64} << 10;
constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr size_t kDefaultSharedBytes = size_t{48} << 10;
constexpr size_t kMaxSharedBytes = size_t{227} << 10;

enum class State { kRunnable, kAtBarrier, kAtShuffle, kDone };

struct Fiber {
  ucontext_t context{};
  std::unique_ptr<char[]> stack;
  uint3 index{};
  State state = State::kRunnable;
  unsigned mask = 0;
  uint64_t payload = 0;
  int src_lane = 0;
  int width = kWarpSize;
  uint64_t result = 0;
  void* fake_stack = nullptr;  // the address sanitizer's, while suspended
};

struct Executor {
  Executor() {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      pthread_attr_getstack(&attr, &addr, &scheduler_stack_bytes);
      scheduler_stack = addr;
      pthread_attr_destroy(&attr);
    }
  }
  ucontext_t scheduler{};
  const void* scheduler_stack = nullptr;  // the OS thread's stack, where the scheduler runs
  size_t scheduler_stack_bytes = 0;
  void* scheduler_fake_stack = nullptr;
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  dim3 grid;
  dim3 block;
  uint3 block_index{};
  std::vector<unsigned char> shared_storage;  // dynamic shared memory, + 128 for alignment
  unsigned char* shared = nullptr;            // 128-byte aligned, shared_bytes long
  size_t shared_bytes = 0;
  void (*body)(void*) = nullptr;
  void* context = nullptr;
  cudaError_t last_error = cudaSuccess;
  std::string message;  // of the last failure
  std::string detail;   // reported by a fiber during the running block
  Order order = Order::kForward;
  std::map<uintptr_t, int> max_dynamic_shared;
};

thread_local Executor tls;

// Switches from `from` to `to`, which runs on the stack [to_stack, to_stack + to_bytes), telling
// the address sanitizer (when built with it) which stack is live. `from_fake` keeps the
// sanitizer's fake stack of `from` while it is suspended; null with `from` null means `from`
// ends for good (setcontext, no return).
void switch_context(ucontext_t* from, void** from_fake, const ucontext_t* to, const void* to_stack,
                    size_t to_bytes) {
#if STRATA_SIMT_ASAN
  __sanitizer_start_switch_fiber(from_fake, to_stack, to_bytes);
#else
  (void)from_fake;
  (void)to_stack;
  (void)to_bytes;
#endif
  if (from == nullptr) {
    setcontext(to);
  } else {
    swapcontext(from, to);
  }
#if STRATA_SIMT_ASAN
  __sanitizer_finish_switch_fiber(*from_fake, nullptr, nullptr);
#endif
}

void to_fiber(ucontext_t* from, void** from_fake, Fiber& to) {
  switch_context(from, from_fake, &to.context, to.stack.get(), kStackBytes);
}
void to_scheduler(ucontext_t* from, void** from_fake) {
  Executor& e = tls;
  switch_context(from, from_fake, &e.scheduler, e.scheduler_stack, e.scheduler_stack_bytes);
}

cudaError_t fail(cudaError_t err, const std::string& message) {
  tls.last_error = err;
  tls.message = message;
  return err;
}

std::string where(const Executor& e) {
  std::ostringstream os;
  os << "block (" << e.block_index.x << "," << e.block_index.y << "," << e.block_index.z << ")";
  return os.str();
}

// Opens the shuffle of the warp of lanes [w0, w0 + lanes) when all its lanes wait at one. Returns
// false on an error (in e.detail).
bool open_shuffle(Executor& e, int w0, int lanes, bool& opened) {
  opened = false;
  for (int l = 0; l < lanes; ++l) {
    if (e.fibers[w0 + l].state != State::kAtShuffle) return true;
  }
  if (lanes < kWarpSize) {
    e.detail = "a warp shuffle in a partial warp of " + std::to_string(lanes) + " threads";
    return false;
  }
  for (int l = 0; l < lanes; ++l) {
    Fiber& f = e.fibers[w0 + l];
    if (f.mask != kFullMask || f.width != kWarpSize) {
      e.detail =
          "a warp shuffle with a mask other than 0xffffffff or a width other than 32 (not "
          "emulated)";
      return false;
    }
    f.result = e.fibers[w0 + ((f.src_lane % kWarpSize) + kWarpSize) % kWarpSize].payload;
  }
  for (int l = 0; l < lanes; ++l) e.fibers[w0 + l].state = State::kRunnable;
  opened = true;
  return true;
}

int block_threads(const Executor& e) { return static_cast<int>(e.block.x * e.block.y * e.block.z); }

// The next runnable lane of f's warp after f in the schedule's lane order (wrapping), or null.
Fiber* next_in_warp(Executor& e, const Fiber* f) {
  const int i = static_cast<int>(f - e.fibers.data());
  const int w0 = i - i % kWarpSize;
  const int lanes = std::min(kWarpSize, block_threads(e) - w0);
  const int step = e.order == Order::kForward ? 1 : lanes - 1;
  for (int k = 1, l = i - w0; k < lanes + 1; ++k) {
    l = (l + step) % lanes;
    Fiber& g = e.fibers[w0 + l];
    if (g.state == State::kRunnable) return &g;
  }
  return nullptr;
}

// Suspends the calling fiber in `state`. A shuffle that this lane completes opens at once and the
// lane runs on; otherwise control passes straight to the next runnable lane of the warp (one
// context switch), or to the scheduler when there is none.
void yield(State state) {
  Executor& e = tls;
  Fiber* f = e.current;
  f->state = state;
  if (state == State::kAtShuffle) {
    const int i = static_cast<int>(f - e.fibers.data());
    const int w0 = i - i % kWarpSize;
    bool opened = false;
    if (!open_shuffle(e, w0, std::min(kWarpSize, block_threads(e) - w0), opened)) {
      to_scheduler(&f->context, &f->fake_stack);  // e.detail ends the block
      return;
    }
    if (opened) return;
  }
  Fiber* next = next_in_warp(e, f);
  if (next != nullptr) {
    e.current = next;
    to_fiber(&f->context, &f->fake_stack, *next);
  } else {
    to_scheduler(&f->context, &f->fake_stack);
  }
}

void fiber_entry() {
#if STRATA_SIMT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  Executor& e = tls;
  e.body(e.context);
  e.current->state = State::kDone;
  Fiber* next = next_in_warp(e, e.current);
  if (next != nullptr) {
    e.current = next;
    to_fiber(nullptr, nullptr, *next);
  }
  to_scheduler(nullptr, nullptr);
}

std::string stuck_report(const Executor& e, int n) {
  int barrier = 0, shuffle = 0, done = 0;
  for (int i = 0; i < n; ++i) {
    barrier += e.fibers[i].state == State::kAtBarrier;
    shuffle += e.fibers[i].state == State::kAtShuffle;
    done += e.fibers[i].state == State::kDone;
  }
  std::ostringstream os;
  if (barrier > 0 && shuffle == 0) {
    os << "__syncthreads reached by " << barrier << " of " << n << " threads while " << done
       << " have exited";
  } else {
    os << "threads wait forever: " << shuffle << " at a warp shuffle whose warp does not reach it ("
       << barrier << " at __syncthreads, " << done << " exited, of " << n << ")";
  }
  return os.str();
}

// Runs the current block to its end. Returns false (with e.detail) when it cannot finish.
bool run_block(Executor& e) {
  const int n = block_threads(e);
  if (e.fibers.size() < static_cast<size_t>(n)) e.fibers.resize(n);
  for (int i = 0; i < n; ++i) {
    Fiber& f = e.fibers[i];
    if (!f.stack) f.stack.reset(new char[kStackBytes]);
    f.index = uint3{i % e.block.x, (i / e.block.x) % e.block.y, i / (e.block.x * e.block.y)};
    f.state = State::kRunnable;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &e.scheduler;
    makecontext(&f.context, fiber_entry, 0);
  }
  std::fill(e.shared, e.shared + e.shared_bytes, static_cast<unsigned char>(0xff));
  // Warp-serial: each warp runs (its shuffles opened by the last lane to reach them) until it
  // waits at __syncthreads or ends, before the next warp starts; a legal GPU schedule that keeps
  // warps as far apart as possible between barriers.
  const bool forward = e.order == Order::kForward;
  const int warps = (n + kWarpSize - 1) / kWarpSize;
  for (;;) {
    for (int wk = 0; wk < warps; ++wk) {
      const int w0 = (forward ? wk : warps - 1 - wk) * kWarpSize;
      const int lanes = std::min(kWarpSize, n - w0);
      for (;;) {
        Fiber* f = nullptr;
        for (int lk = 0; lk < lanes && f == nullptr; ++lk) {
          Fiber& g = e.fibers[w0 + (forward ? lk : lanes - 1 - lk)];
          if (g.state == State::kRunnable) f = &g;
        }
        if (f == nullptr) break;
        e.current = f;
        to_fiber(&e.scheduler, &e.scheduler_fake_stack, *f);
        if (!e.detail.empty()) return false;
      }
    }
    int barrier = 0, done = 0;
    for (int i = 0; i < n; ++i) {
      barrier += e.fibers[i].state == State::kAtBarrier;
      done += e.fibers[i].state == State::kDone;
    }
    if (done == n) return true;
    if (barrier == 0 || barrier + done != n || done != 0) {
      e.detail = stuck_report(e, n);
      return false;
    }
    for (int i = 0; i < n; ++i) e.fibers[i].state = State::kRunnable;
  }
}

}  // namespace

void set_order(Order order) { tls.order = order; }

std::string take_last_message() {
  std::string m = std::move(tls.message);
  tls.message.clear();
  return m;
}

cudaError_t set_attribute(uintptr_t kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > kMaxSharedBytes) {
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: value " + std::to_string(value) +
                                           " is above the 227 KiB of sm_90");
  }
  tls.max_dynamic_shared[kernel] = value;
  return cudaSuccess;
}

const uint3& thread_idx() { return tls.current->index; }
const uint3& block_idx() { return tls.block_index; }
const dim3& block_dim() { return tls.block; }
const dim3& grid_dim() { return tls.grid; }
void* dynamic_shared_bytes() { return tls.shared; }
void sync_block() { yield(State::kAtBarrier); }

void kernel_error(const std::string& message) {
  Executor& e = tls;
  e.detail = message;
  Fiber* f = e.current;
  to_scheduler(&f->context, &f->fake_stack);  // the block ends; this fiber never resumes
  __builtin_unreachable();
}

void warp_converge() { (void)warp_exchange(kFullMask, 0, 0, kWarpSize); }

int lane_id() {
  const uint3& i = tls.current->index;
  const unsigned linear = i.x + tls.block.x * (i.y + tls.block.y * i.z);
  return static_cast<int>(linear % kWarpSize);
}

uint64_t warp_exchange(unsigned mask, uint64_t payload, int src_lane, int width) {
  Fiber* f = tls.current;
  f->mask = mask;
  f->payload = payload;
  f->src_lane = src_lane;
  f->width = width;
  yield(State::kAtShuffle);
  return f->result;
}

void run_grid(const Config& c, uintptr_t kernel, void (*body)(void*), void* context) {
  Executor& e = tls;
  const uint64_t threads = uint64_t{c.block.x} * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 ||
      c.grid.z == 0 || c.grid.x > 0x7fffffffu || c.grid.y > 65535 || c.grid.z > 65535) {
    std::ostringstream os;
    os << "launch with grid (" << c.grid.x << "," << c.grid.y << "," << c.grid.z << ") and block ("
       << c.block.x << "," << c.block.y << "," << c.block.z << ") is outside sm_90's limits";
    fail(cudaErrorInvalidConfiguration, os.str());
    return;
  }
  if (c.shared_bytes > kDefaultSharedBytes) {
    auto allowed = e.max_dynamic_shared.find(kernel);
    if (allowed == e.max_dynamic_shared.end() ||
        static_cast<size_t>(allowed->second) < c.shared_bytes) {
      fail(cudaErrorInvalidValue, "launch with " + std::to_string(c.shared_bytes) +
                                      " bytes of dynamic shared memory, above 48 KiB without "
                                      "cudaFuncSetAttribute allowing it");
      return;
    }
  }
  e.grid = c.grid;
  e.block = c.block;
  e.shared_storage.assign(c.shared_bytes + 128, 0);
  const auto base = reinterpret_cast<uintptr_t>(e.shared_storage.data());
  e.shared = e.shared_storage.data() + ((128 - base % 128) % 128);
  e.shared_bytes = c.shared_bytes;
  e.body = body;
  e.context = context;
  e.detail.clear();
  for (unsigned z = 0; z < c.grid.z; ++z) {
    for (unsigned y = 0; y < c.grid.y; ++y) {
      for (unsigned x = 0; x < c.grid.x; ++x) {
        e.block_index = uint3{x, y, z};
        if (!run_block(e)) {
          fail(cudaErrorLaunchFailure, where(e) + ": " + e.detail);
          e.detail.clear();
          return;
        }
      }
    }
  }
}

}  // namespace simt

cudaError_t cudaGetLastError() {
  const cudaError_t err = simt::tls.last_error;
  simt::tls.last_error = cudaSuccess;
  return err;
}

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaError(unknown)";
}

// The emulator's message of the last failure (what the CUDA runtime's description would be).
const char* cudaGetErrorString(cudaError_t err) {
  if (err != cudaSuccess && !simt::tls.message.empty()) return simt::tls.message.c_str();
  return cudaGetErrorName(err);
}
