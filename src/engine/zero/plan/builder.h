// zero::PlanBuilder: the plan the ZeRO compiler's lowering writes (sched::Plan), with what the
// step's reports need of each piece: the kind of every buffer (ZeroStep::memory()) and the
// replays each task does its work in (ZeroStep::predict()). Each lowering stage takes it by
// reference and appends; it holds nothing of any stage's own.
//
// Thread safety: none (one compile at a time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "scheduler/plan.h"

namespace strata::engine::zero {

// What a plan buffer holds (ZeroStep::memory()).
enum class BufferKind : uint8_t {
  kHome,  // a model-state home: the stage-3 parameter shard, a gradient shard
  kGradWhole,
  kGradBucket,
  kParamStaging,
  kGathered,
  kNvmeStaging,
  kOptimizerIo,
  kCheckpoint,
};

// When a task of the plan does its work (the replays ZeroStep::predict() adds up): every
// replay, those that apply an update, those that do not, or the last micro-batch's.
enum class RunsWhen : uint8_t { kEvery, kUpdate, kNoUpdate, kLastMicro };

// The budgets' sizes rounded as the tiers place buffers: 4096 bytes in pinned host memory, 256
// on the device (sched::Plan::Buffer::offset).
inline uint64_t round_page(uint64_t n) { return (n + 4095) / 4096 * 4096; }
inline uint64_t round_device(uint64_t n) { return (n + 255) / 256 * 256; }

// A collective of `kind` over `count` elements of `dt` per rank, its buffers to be set.
inline comm::CollectiveCall collective(comm::CollectiveKind kind, size_t count, DType dt) {
  comm::CollectiveCall call;
  call.kind = kind;
  call.count = count;
  call.dtype = dt;
  return call;
}

// What the step's reports need of a plan besides the plan itself.
struct PlanNotes {
  std::vector<BufferKind> kinds;  // by BufferId
  std::vector<RunsWhen> when;     // by TaskId (kEvery unless set)
};

class PlanBuilder {
 public:
  sched::Plan plan;
  PlanNotes notes;

  sched::BufferId add_buffer(BufferKind kind, std::string name, sched::Tier tier, uint64_t bytes,
                             bool initially_valid = false);
  sched::TaskId next_task() const { return sched::TaskId(plan.num_tasks()); }
  // The tasks added since `first` run only in replays of `w`; task t only in those of `w`.
  void runs_when(sched::TaskId first, RunsWhen w);
  void task_runs_when(sched::TaskId t, RunsWhen w);
  // The cost model's work of a task (sched::Plan::add_work).
  void work(sched::TaskId t, sched::Work w, double amount) { plan.add_work(t, w, amount); }
  // Task t moves buffer `from` into `to`: it reads and releases `from`, acquires and writes `to`.
  void hands_over(sched::TaskId t, sched::BufferId from, sched::BufferId to) {
    plan.reads(t, from);
    plan.release(t, from);
    plan.acquire(t, to);
    plan.writes(t, to);
  }
  // A task of `bytes` on the NVMe lane: its bytes, and one request's latency.
  void nvme_work(sched::TaskId t, sched::Work w, double bytes);
  // A collective of `kind` over `count` elements of `dt` per rank (collective_work.h).
  // On device buffers (`on_device`): the device links' work.
  void collective_work(sched::TaskId t, comm::CollectiveKind kind, size_t count, DType dt, int rank,
                       int ranks, bool on_device = false);
};

}  // namespace strata::engine::zero
