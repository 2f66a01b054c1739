// The SIMT emulator's runtime (simt.h): per-OS-thread executor, fibers, barriers, warp shuffles,
// launch limits and the CUDA runtime calls of simt_cuda.h.
//
// Fibers: made with makecontext and first entered with setcontext; every later switch is a
// _setjmp/_longjmp pair between stacks, which, unlike swapcontext, makes no system call (the
// signal mask is never touched): swapcontext's sigprocmask was most of the emulator's time. A
// fiber whose kernel body ends parks at the top of its loop and is resumed for the next block or
// launch on its OS thread, so fibers are made once, not once per block; a fiber left in the
// middle of a body (a failed block) is made afresh. Jumping between the fibers' own stacks is
// what _longjmp is used for by coroutine libraries; the checked longjmp of _FORTIFY_SOURCE would
// refuse it, so it is switched off here.
#undef _FORTIFY_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
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
  int id = 0;            // its index in the executor's fibers
  ucontext_t context{};  // for the first entry only
  jmp_buf resume{};      // where the fiber continues when switched to
  bool fresh = true;     // made by makecontext and not yet entered: enter with setcontext
  bool parked = false;   // its body ended and it waits at the top of its loop (resume is valid)
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
  jmp_buf scheduler{};
  ucontext_t fiber_template{};  // getcontext once; each fiber is made from a copy
  bool have_template = false;
  const void* scheduler_stack = nullptr;  // the OS thread's stack, where the scheduler runs
  size_t scheduler_stack_bytes = 0;
  void* scheduler_fake_stack = nullptr;
  std::deque<Fiber> fibers;
  std::vector<int> at_shuffle;  // per warp of the block: lanes waiting at a shuffle  // grows at
                                // the end only: parked fibers keep their address
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
};

// The OS thread's executor, made on first use and freed when the thread ends. A plain pointer,
// so that each access costs no thread-local initialisation check (the emulator's hottest path).
thread_local Executor* tls_executor = nullptr;
struct ExecutorReaper {
  ~ExecutorReaper() {
    delete tls_executor;
    tls_executor = nullptr;
  }
};
thread_local ExecutorReaper reaper;
[[gnu::noinline]] Executor& make_executor() {
  (void)&reaper;  // its destructor frees the executor with the thread
  tls_executor = new Executor;
  return *tls_executor;
}
inline Executor& executor() {
  Executor* e = tls_executor;
  return e != nullptr ? *e : make_executor();
}

// cudaFuncSetAttribute's values: process-wide, as on a GPU (set on one thread, used on another).
std::mutex attributes_mu;
std::map<uintptr_t, int> max_dynamic_shared;
std::atomic<LaunchHook> launch_hook{nullptr};

void start_switch(void** from_fake, const void* to_stack, size_t to_bytes) {
#if STRATA_SIMT_ASAN
  __sanitizer_start_switch_fiber(from_fake, to_stack, to_bytes);
#else
  (void)from_fake;
  (void)to_stack;
  (void)to_bytes;
#endif
}
void finish_switch(void* fake) {
#if STRATA_SIMT_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)fake;
#endif
}

// Runs `to` (entering it for the first time, or resuming it).
[[noreturn]] void enter(Fiber& to) {
  if (to.fresh) {
    to.fresh = false;
    setcontext(&to.context);
  }
  _longjmp(to.resume, 1);
}

// Saves the running context in `from` (`from_fake`: the address sanitizer's fake stack of it
// while it is suspended) and runs fiber `to`; returns when something resumes `from`. `from`
// null: the running fiber ends for good. Never inlined, so that _setjmp saves the caller's state
// at the call, which nothing changes before the caller is resumed.
[[gnu::noinline]] void to_fiber(jmp_buf* from, void** from_fake, Fiber& to) {
  if (from == nullptr) {
    start_switch(nullptr, to.stack.get(), kStackBytes);
    enter(to);
  }
  if (_setjmp(*from) == 0) {
    start_switch(from_fake, to.stack.get(), kStackBytes);
    enter(to);
  }
  finish_switch(*from_fake);
}
[[noreturn, gnu::noinline]] void jump_to_scheduler(void** from_fake) {
  Executor& e = executor();
  start_switch(from_fake, e.scheduler_stack, e.scheduler_stack_bytes);
  _longjmp(e.scheduler, 1);
}
[[gnu::noinline]] void to_scheduler(jmp_buf* from, void** from_fake) {
  if (from == nullptr) jump_to_scheduler(nullptr);
  if (_setjmp(*from) == 0) jump_to_scheduler(from_fake);
  finish_switch(*from_fake);
}

cudaError_t fail(cudaError_t err, const std::string& message) {
  executor().last_error = err;
  executor().message = message;
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
  if (++e.at_shuffle[static_cast<size_t>(w0 / kWarpSize)] < lanes) return true;
  e.at_shuffle[static_cast<size_t>(w0 / kWarpSize)] = 0;
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
  const int i = f->id;
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

// Suspends fiber f (saving where it continues) and runs the next runnable lane of its warp, or
// the scheduler when there is none.
void pass_on(Executor& e, Fiber* f) {
  Fiber* next = next_in_warp(e, f);
  if (next != nullptr) {
    e.current = next;
    to_fiber(&f->resume, &f->fake_stack, *next);
  } else {
    to_scheduler(&f->resume, &f->fake_stack);
  }
}

// Suspends the calling fiber in `state`. A shuffle that this lane completes opens at once and the
// lane runs on; otherwise control passes straight to the next runnable lane of the warp (one
// context switch), or to the scheduler when there is none.
void yield(State state) {
  Executor& e = executor();
  Fiber* f = e.current;
  f->state = state;
  if (state == State::kAtShuffle) {
    const int i = f->id;
    const int w0 = i - i % kWarpSize;
    bool opened = false;
    if (!open_shuffle(e, w0, std::min(kWarpSize, block_threads(e) - w0), opened)) {
      to_scheduler(&f->resume, &f->fake_stack);  // e.detail ends the block
      return;
    }
    if (opened) return;
  }
  pass_on(e, f);
}

// A fiber's life: run the kernel body for the thread it stands for, then park until the next
// block or launch on this OS thread resumes it.
void fiber_entry() {
  finish_switch(nullptr);
  Executor& e = executor();
  for (;;) {
    e.body(e.context);
    Fiber* f = e.current;
    f->state = State::kDone;
    f->parked = true;
    pass_on(e, f);
    f->parked = false;  // resumed for a new block
  }
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

// The context fibers are made from (getcontext, which returns twice in principle, is kept out of
// run_block's frame).
[[gnu::noinline]] void make_template(Executor& e) {
  getcontext(&e.fiber_template);
  e.have_template = true;
}

// Runs the current block to its end. Returns false (with e.detail) when it cannot finish.
bool run_block(Executor& e) {
  const int n = block_threads(e);
  while (e.fibers.size() < static_cast<size_t>(n)) {
    e.fibers.emplace_back();
    e.fibers.back().id = static_cast<int>(e.fibers.size()) - 1;
  }
  for (int i = 0; i < n; ++i) {
    Fiber& f = e.fibers[i];
    if (!f.stack) f.stack.reset(new char[kStackBytes]);
    f.index = uint3{i % e.block.x, (i / e.block.x) % e.block.y, i / (e.block.x * e.block.y)};
    f.state = State::kRunnable;
    if (f.parked) continue;  // resumed where it parked
    if (!e.have_template) make_template(e);
    f.context = e.fiber_template;  // (re)made: new, or left inside a body by a failed block
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;  // fiber_entry never returns
    makecontext(&f.context, fiber_entry, 0);
    f.fresh = true;
  }
  e.at_shuffle.assign(static_cast<size_t>((n + kWarpSize - 1) / kWarpSize), 0);
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

void set_order(Order order) { executor().order = order; }

std::string take_last_message() {
  std::string m = std::move(executor().message);
  executor().message.clear();
  return m;
}

int take_last_error(std::string& message) {
  const cudaError_t err = executor().last_error;
  executor().last_error = cudaSuccess;
  message = take_last_message();
  return err;
}

cudaError_t set_attribute(uintptr_t kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > kMaxSharedBytes) {
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: value " + std::to_string(value) +
                                           " is above the 227 KiB of sm_90");
  }
  std::lock_guard lock(attributes_mu);
  max_dynamic_shared[kernel] = value;
  return cudaSuccess;
}

const uint3& thread_idx() { return executor().current->index; }
const uint3& block_idx() { return executor().block_index; }
const dim3& block_dim() { return executor().block; }
const dim3& grid_dim() { return executor().grid; }
void* dynamic_shared_bytes() { return executor().shared; }
void sync_block() { yield(State::kAtBarrier); }

void kernel_error(const std::string& message) {
  executor().detail = message;
  to_scheduler(nullptr, nullptr);  // the block ends; this fiber is made afresh next time
  __builtin_unreachable();
}

void warp_converge() { (void)warp_exchange(kFullMask, 0, 0, kWarpSize); }

int lane_id() {
  const uint3& i = executor().current->index;
  const unsigned linear = i.x + executor().block.x * (i.y + executor().block.y * i.z);
  return static_cast<int>(linear % kWarpSize);
}

uint64_t warp_exchange(unsigned mask, uint64_t payload, int src_lane, int width) {
  Fiber* f = executor().current;
  f->mask = mask;
  f->payload = payload;
  f->src_lane = src_lane;
  f->width = width;
  yield(State::kAtShuffle);
  return f->result;
}

cudaError_t check_launch(const Config& c, uintptr_t kernel) {
  const uint64_t threads = uint64_t{c.block.x} * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 ||
      c.grid.z == 0 || c.grid.x > 0x7fffffffu || c.grid.y > 65535 || c.grid.z > 65535) {
    std::ostringstream os;
    os << "launch with grid (" << c.grid.x << "," << c.grid.y << "," << c.grid.z << ") and block ("
       << c.block.x << "," << c.block.y << "," << c.block.z << ") is outside sm_90's limits";
    return fail(cudaErrorInvalidConfiguration, os.str());
  }
  if (c.shared_bytes > kDefaultSharedBytes) {
    std::lock_guard lock(attributes_mu);
    auto allowed = max_dynamic_shared.find(kernel);
    if (allowed == max_dynamic_shared.end() ||
        static_cast<size_t>(allowed->second) < c.shared_bytes) {
      return fail(cudaErrorInvalidValue, "launch with " + std::to_string(c.shared_bytes) +
                                             " bytes of dynamic shared memory, above 48 KiB "
                                             "without cudaFuncSetAttribute allowing it");
    }
  }
  return cudaSuccess;
}

void set_launch_hook(LaunchHook hook) { launch_hook.store(hook); }

void launch(const Launch& l) {
  const LaunchHook hook = launch_hook.load();
  if (hook != nullptr && hook(l)) return;
  run_grid(l.config, l.kernel, l.body, l.context);
  l.destroy(l.context);
}

void run_grid(const Config& c, uintptr_t kernel, void (*body)(void*), void* context) {
  Executor& e = executor();
  if (check_launch(c, kernel) != cudaSuccess) return;
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

// The emulated CUDA runtime (tests/cuda_emu) has its own, which read the emulator's errors.
#if !STRATA_CUDA_EMULATE
cudaError_t cudaGetLastError() {
  const cudaError_t err = simt::executor().last_error;
  simt::executor().last_error = cudaSuccess;
  return err;
}

const char* cudaGetErrorName(cudaError_t err) { return simt::error_name(err); }

// The emulator's message of the last failure (what the CUDA runtime's description would be).
const char* cudaGetErrorString(cudaError_t err) {
  if (err != cudaSuccess && !simt::executor().message.empty())
    return simt::executor().message.c_str();
  return cudaGetErrorName(err);
}

#endif  // !STRATA_CUDA_EMULATE
