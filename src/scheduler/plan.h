// Plan: one training step as a DAG of tasks bound to lanes (lane.h), with the buffers the tasks
// acquire and release from per-tier pools. A plan is built once, finalized (validated and its
// buffers placed under the budgets), then replayed every step by an Executor (executor.h).
//
// Building: add() appends a task; the order of add() calls is each in-order lane's order.
// depend(t, on) makes t start after `on` has completed (stream-to-stream: an event; anything
// else: the host learns of completion). add_buffer() declares a pool buffer; acquire()/release()
// bound its lifetime to tasks (a buffer never acquired is live for the whole step, placed once);
// reads()/writes() declare the tasks' accesses, which finalize() checks.
//
// finalize(budgets) checks, before any memory is touched:
//   - every task has a known lane and every dependency names a task of the plan;
//   - no cycle, counting the implied edges of in-order lanes (a dependency on a later task of
//     the same in-order lane is a cycle: it could never run);
//   - every buffer read is written first: a writer (or initially_valid) that is an ancestor of
//     the reader; every access of an acquired buffer lies between its acquire and release; and
//     two accesses of one buffer, one of them a write, are ordered by dependencies;
// then places the buffers: tasks are walked in a topological order as eager as the run-time
// (ready tasks that acquire memory first, read-ahead as far as the budget allows; otherwise by
// depth in the graph, then plan order); a task whose buffer would not fit its tier's budget is
// postponed until earlier tasks release memory (the walk is greedy and does not backtrack: a plan
// that fits only if one acquirer waits for another can be refused; a dependency fixes that);
// a buffer that reuses memory gets a dependency on the task that released it. That bounds any
// read-ahead by the budget ("memory dependencies"). Free memory released by an ancestor of the
// acquiring task is reused first (no new wait), then new memory up to the budget, and only then
// memory released by an unrelated task (a new wait); so a tier without a budget never adds a
// wait, and its peak is what the plan's concurrency allows. The peak per tier is computed from the
// plan alone; a plan that cannot fit is refused (kOutOfMemory) with its peak without a budget, the
// budget, and the buffers and tasks holding memory where it got stuck.
//
// Ownership: owns the task functions. Thread safety: none while building; a finalized plan is
// read-only (the Executor reads it from several threads).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gpu/device.h"
#include "scheduler/lane.h"

namespace strata::sched {

using TaskId = int32_t;
using BufferId = int32_t;

// What a task function gets when it runs.
struct TaskContext {
  gpu::Stream* stream = nullptr;      // the lane's stream (stream lanes); null on host lanes
  int64_t step = 0;                   // replay count, from 1
  int worker = 0;                     // host lanes: which worker thread runs it
  void* const* buffers = nullptr;     // base address of every plan buffer (by BufferId)
  const void* replay_args = nullptr;  // what Executor::replay(args) was given for this replay
  void* buffer(BufferId id) const { return buffers[id]; }
  // The replay's arguments as the plan's builder typed them (valid until replay() returns).
  template <typename T>
  const T& args() const {
    return *static_cast<const T*>(replay_args);
  }
};
// Stream lanes: enqueue the work on ctx.stream and return (never synchronize). Host lanes: do
// the work. A non-OK Status stops the step (Executor::replay returns it).
using TaskFn = std::function<Status(const TaskContext&)>;

// Work a task does, for the cost model (cost_model.h): amounts by kind, each priced by the
// machine's measured rate of that kind. Two compute classes, measured apart because their
// kernel mix differs: kFlops (the repeated layers) and kFlopsHead (the input and output layers).
enum class Work : uint8_t {
  kFlops = 0,
  kFlopsHead,
  kH2DBytes,
  kD2HBytes,
  kNvmeReadBytes,
  kNvmeWriteBytes,
  kNetBytes,            // bytes this rank sends in collectives that move data (all-gather, ...)
  kAdamElements,        // CPU Adam updates
  kDeviceAdamElements,  // Adam updates on the device
  kHostBytes,           // memory-bound host passes (checks, casts, sums, copies): bytes read
  kNvmeOps,             // NVMe requests (reads or writes): each pays the disk's latency
  kNetReduceBytes,      // bytes this rank sends in reducing collectives (reduce-scatter, ...)
  kNetCalls,            // collective calls that move data: each pays the network's latency
  kNetReduceCalls,      // reducing collective calls: each pays their latency
  // The same four for collectives on device buffers (the links between the devices: NVLink,
  // or the network between machines, as the device communicator sees them).
  kLinkBytes,
  kLinkReduceBytes,
  kLinkCalls,
  kLinkReduceCalls,
  kDeviceBytes,  // memory-bound device passes (the kept gradients' sums, casts, checks): bytes
                 // read and written
};
inline constexpr int kNumWorkKinds = 19;
std::string_view work_name(Work work);  // "flops", "head flops", "h2d bytes", ...

struct Budgets {
  uint64_t bytes[kNumTiers] = {UINT64_MAX, UINT64_MAX};  // per tier; UINT64_MAX = unbounded
};

class Plan {
 public:
  struct Task {
    std::string name;
    Lane lane = Lane::kCompute;
    TaskFn fn;
    std::vector<TaskId> deps;         // explicit dependencies
    std::vector<TaskId> memory_deps;  // added by finalize(): releasers of reused memory
    std::vector<BufferId> acquires, releases, reads, writes;
    double work[kNumWorkKinds] = {};  // add_work()
  };
  struct Buffer {
    std::string name;
    Tier tier = Tier::kDevice;
    uint64_t bytes = 0;
    bool initially_valid = false;  // holds data from before the step (counts as written)
    TaskId acquired_by = -1, released_by = -1;
    uint64_t offset = 0;  // in its tier's arena (finalize): 256-byte aligned on the device,
                          // 4096 in pinned host memory (O_DIRECT)
  };

  BufferId add_buffer(std::string name, Tier tier, uint64_t bytes, bool initially_valid = false);
  TaskId add(std::string name, Lane lane, TaskFn fn, std::vector<TaskId> deps = {});
  void depend(TaskId task, TaskId on);
  void acquire(TaskId task, BufferId buffer);
  void release(TaskId task, BufferId buffer);
  void reads(TaskId task, BufferId buffer);
  void writes(TaskId task, BufferId buffer);
  // Adds `amount` of `work` to the task's cost (cost_model.h); it changes nothing else.
  void add_work(TaskId task, Work work, double amount);

  Status finalize(const Budgets& budgets = {});

  bool finalized() const { return finalized_; }
  size_t num_tasks() const { return tasks_.size(); }
  size_t num_buffers() const { return buffers_.size(); }
  const Task& task(TaskId id) const { return tasks_[static_cast<size_t>(id)]; }
  const Buffer& buffer(BufferId id) const { return buffers_[static_cast<size_t>(id)]; }
  // After finalize(): tasks in the order placement walked them (a topological order), the
  // tasks of each lane in lane order, the arena size (peak) of each tier, and the peak the plan
  // would need with no budget.
  const std::vector<TaskId>& order() const { return order_; }
  const std::vector<TaskId>& lane_tasks(Lane lane) const {
    return lane_tasks_[static_cast<int>(lane)];
  }
  uint64_t peak_bytes(Tier tier) const { return peak_[static_cast<int>(tier)]; }
  uint64_t unbounded_peak_bytes(Tier tier) const { return unbounded_peak_[static_cast<int>(tier)]; }
  // After finalize(): the most bytes of the buffers `which` selects that are live at once along
  // order() (whole-step buffers throughout; an acquired buffer from its acquirer to its
  // releaser), e.g. one kind of buffer's share of the peak.
  uint64_t peak_bytes_of(const std::function<bool(BufferId)>& which) const;
  size_t num_memory_deps() const;
  // Everything finalize() decided, as text: each task (name, lane, dependencies of every kind,
  // buffer accesses, work), each buffer (name, tier, bytes, lifetime, offset), the order and
  // the peaks. Two plans with the same dump are the same plan but for their task functions
  // (refactors compare dumps before and after).
  void dump(std::ostream& os) const;
  // Every dependency of a task: explicit, memory, and its predecessor on an in-order lane.
  void for_each_predecessor(TaskId task, const std::function<void(TaskId)>& fn) const;

 private:
  // Successor lists and in-degrees over every predecessor relation (for_each_predecessor).
  void successors(std::vector<std::vector<TaskId>>& succ, std::vector<int>& indeg) const;
  Status check_structure() const;
  Status check_accesses(const std::vector<std::vector<uint64_t>>& ancestors) const;
  Status place(const Budgets& budgets, const std::vector<int>& level,
               const std::vector<std::vector<uint64_t>>& ancestors, bool bounded);

  std::vector<Task> tasks_;
  std::vector<Buffer> buffers_;
  std::vector<TaskId> order_;
  std::vector<TaskId> lane_tasks_[kNumLanes];
  std::vector<TaskId> lane_prev_;  // predecessor on an in-order lane, or -1
  uint64_t peak_[kNumTiers] = {0, 0};
  uint64_t unbounded_peak_[kNumTiers] = {0, 0};
  bool finalized_ = false;
  std::string build_error_;  // first misuse while building, reported by finalize()
};

}  // namespace strata::sched
