// Executor: replays a finalized Plan (plan.h) every step on a Device.
//
// Lanes: compute, h2d, d2h (and link, when the plan has link tasks) each get a Stream of the
// device; the replaying thread enqueues each stream task as soon as its host-lane dependencies
// have completed and its stream-lane dependencies have been enqueued (a dependency on another
// stream is an event wait), so the streams are fed ahead and never stepped one kernel at a time.
// nvme, cpu and comm tasks run on worker threads owned by the executor (cpu tasks inside a bounded
// oneTBB task_arena); a host-lane task starts when its last dependency completes (a stream task
// reports completion through a host callback before its event record). Ready host tasks start in
// the order Plan::finalize walked them (Plan::order()).
//
// Memory: the plan's buffers are placed in one device allocation and one pinned host
// allocation of the plan's peak per tier, made by create(); replay() allocates nothing on the
// heap itself (tests/scheduler checks this with a counting operator new over the host lanes).
// The devices' own enqueue paths may: a CpuStream queues a std::function per work item, and
// CUDA's host callback wraps its function on the heap.
//
// Failure: a task that returns an error (or throws) stops the step: nothing new is started,
// tasks in flight finish, the streams are drained, and replay() returns that Status. The
// executor is then broken: every later replay() returns the same Status at once.
//
// Trace: with ExecutorOptions::trace (or set_trace(true) before a replay), every task's start
// and end are recorded (trace.h); a stream task costs two host callbacks on its stream for that,
// each a host round trip that stalls a GPU stream, so callers trace only the steps they keep.
// Untraced, a stream task costs a callback only when a host task waits for it.
//
// Ownership: owns the plan, the streams, events, worker threads and arenas; the Device must
// outlive it. Thread safety: replay() from one thread at a time.
#pragma once

#include <oneapi/tbb/task_arena.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "cpu/pinned_memory.h"
#include "gpu/device.h"
#include "scheduler/plan.h"
#include "scheduler/trace.h"

namespace strata::sched {

struct ExecutorOptions {
  int cpu_threads = 1;   // threads of the cpu lane's oneTBB arena (the host's share of cores)
  int cpu_workers = 2;   // cpu-lane tasks that may run at once (at most cpu_threads; 1..64)
  int nvme_workers = 4;  // nvme-lane tasks in flight at once (1..64)
  bool trace = true;     // record every task's span (StepTrace)
  cpu::PinnedPool* pool = nullptr;  // pinned tier; default_pinned_pool() when null
};

class Executor {
 public:
  // `plan` must be finalized. Allocates the tiers' arenas (kOutOfMemory over a cap), creates
  // the streams and events and starts the workers.
  static Result<std::unique_ptr<Executor>> create(gpu::Device& device, Plan plan,
                                                  const ExecutorOptions& options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs one step of the plan; returns when every lane is idle. Every task of this replay sees
  // `args` as TaskContext::replay_args (what this replay is to do: the plan's builder defines
  // it), which must stay valid until replay() returns.
  Status replay(const void* args = nullptr);

  const Plan& plan() const { return plan_; }
  gpu::Stream& stream(Lane lane);  // stream lanes only
  void* buffer(BufferId id) const { return buffer_ptrs_[static_cast<size_t>(id)]; }
  // The pinned host allocation holding every pinned-tier buffer (to register it for I/O).
  void* pinned_arena() const { return host_arena_.data(); }
  size_t pinned_arena_bytes() const { return host_arena_.mapped_bytes(); }
  const StepTrace& last_trace() const { return trace_; }
  // Whether the next replays record stream tasks' spans (between replays only).
  void set_trace(bool on) { trace_on_.store(on); }
  bool tracing() const { return trace_on_.load(); }
  int64_t steps() const { return step_; }

 private:
  struct HostLane;
  Executor(gpu::Device& device, Plan plan, const ExecutorOptions& options);
  Status init();
  void worker_loop(HostLane& lane, int worker);
  void complete_locked(TaskId t);        // successors' counters; requires mu_
  void push_ready_locked(TaskId t);      // a ready host task onto its lane's heap; requires mu_
  bool later(TaskId a, TaskId b) const;  // a starts after b (heap order: plan walk position)
  void fail_locked(Status st);
  Status enqueue_stream_task(TaskId t);
  void on_stream_task_done(TaskId t);
  int64_t now_ns() const;

  gpu::Device& device_;
  Plan plan_;
  ExecutorOptions options_;
  std::unique_ptr<gpu::Stream> streams_[kNumStreamLanes];
  std::vector<std::unique_ptr<gpu::Event>> events_;  // by TaskId; null when not needed
  gpu::DeviceBuffer device_arena_;
  cpu::PinnedBuffer host_arena_;
  std::vector<void*> buffer_ptrs_;
  tbb::task_arena cpu_arena_;

  // Static, from the plan.
  std::vector<int32_t> pos_;                       // position in plan order (host priority)
  std::vector<int32_t> waits_;                     // completions a task waits for
  std::vector<std::vector<TaskId>> succ_;          // successors counting this task's completion
  std::vector<std::vector<TaskId>> stream_waits_;  // stream preds on other stream lanes
  std::vector<uint8_t> notify_;                    // stream task with host-lane successors
  int32_t num_host_tasks_ = 0;

  // Per replay, guarded by mu_.
  std::mutex mu_;
  std::condition_variable dispatch_cv_;
  std::condition_variable idle_cv_;
  std::vector<int32_t> remaining_;
  std::vector<uint8_t> enqueued_;
  std::vector<TaskId> stream_done_;  // reported by callbacks, processed by the dispatcher
  size_t stream_done_read_ = 0;
  int32_t host_pending_ = 0;
  int32_t running_ = 0;
  bool failed_ = false;
  bool stop_ = false;
  Status error_;
  Status broken_;
  std::unique_ptr<HostLane> host_lanes_[kNumLanes];

  int64_t step_ = 0;
  const void* args_ = nullptr;  // the current replay's (replay())
  std::chrono::steady_clock::time_point t0_;
  StepTrace trace_;
  std::atomic<bool> trace_on_{true};  // read by stream callbacks
  std::vector<std::thread> threads_;
};

}  // namespace strata::sched
