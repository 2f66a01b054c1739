// ZeroStep::PlanBuild: the state the parts of ZeroStep::build_plan share while they build the
// plan (zero_plan*.cpp; internal to the engine). It lives for one build_plan() call: the task
// functions, which run later, capture values or the ZeroStep, never the PlanBuild.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/collective_work.h"
#include "engine/zero/plan/checkpoints.h"
#include "engine/zero/plan/gathers.h"
#include "engine/zero/plan/ops.h"
#include "engine/zero_step.h"

namespace strata::engine {

// The budgets' sizes rounded as the tiers place buffers: 4096 bytes in pinned host memory, 256
// on the device (sched::Plan::Buffer::offset).
inline uint64_t round_page(uint64_t n) { return (n + 4095) / 4096 * 4096; }
inline uint64_t round_device(uint64_t n) { return (n + 255) / 256 * 256; }
// Lanes of ZeroStep::moved().
inline constexpr int kH2D = 0, kD2H = 1, kNvmeRead = 2, kNvmeWrite = 3;

struct ZeroStep::PlanBuild {
  explicit PlanBuild(ZeroStep& step);

  const Partitioning& parts;
  std::vector<Kind>& buffer_kind;    // ZeroStep::buffer_kind_: one per buffer of the plan
  std::vector<RunsWhen>& task_when;  // ZeroStep::task_when_: by task (kEvery unless set)
  // The tasks added since `first` run only in replays of `w`.
  void runs_when(sched::TaskId first, RunsWhen w) {
    task_when.resize(plan.num_tasks(), RunsWhen::kEvery);
    for (size_t t = size_t(first); t < task_when.size(); ++t) task_when[t] = w;
  }
  void task_runs_when(sched::TaskId t, RunsWhen w) {
    task_when.resize(plan.num_tasks(), RunsWhen::kEvery);
    task_when[size_t(t)] = w;
  }
  sched::TaskId next_task() const { return sched::TaskId(plan.num_tasks()); }
  int stage = 0;
  int64_t layers = 0;
  DType dt = DType::kF32;
  size_t es = 0;  // dtype_size(dt)
  // Stages 2-3: the dtype of the reduced gradient shards the micro-batches add into (gshard),
  // and its size; dt and es otherwise.
  DType acc = DType::kF32;
  size_t acc_es = 0;
  size_t nb = 0;  // blocks (and partitions)
  // Gradient slots: at stages 2-3 in the segment-major order, each micro-batch's gradient of a
  // block has its own device buffer, pinned buffer and reduction (slot = its micro-batch), so
  // the reduced shards add up in micro-batch order as with one replay per micro-batch; else 1.
  int slots = 1;
  // The index of block b's slot-`slot` gradient buffer in dgrad and gfull.
  size_t at(int slot, int64_t b) const { return static_cast<size_t>(slot) * nb + size_t(b); }
  // The suffix that names a slot's buffers and tasks ("" with one slot).
  std::string slot_name(int slot) const {
    return slots > 1 ? " (micro-batch " + std::to_string(slot) + ")" : std::string();
  }
  int rank = 0, ranks = 1;
  bool delayed = false;  // --delayed-update
  size_t depth = 0;      // prefetch_depth
  sched::Plan plan;

  std::string name(int64_t b) const {
    return b == layers ? std::string("shared") : "layer " + std::to_string(b);
  }
  int64_t numel(int64_t b) const { return parts.block(size_t(b)).numel; }
  int64_t shard(int64_t b) const { return parts.block(size_t(b)).shard_numel; }
  size_t padded_bytes(int64_t b) const { return static_cast<size_t>(shard(b) * ranks) * es; }
  size_t shard_bytes(int64_t b) const { return static_cast<size_t>(shard(b)) * es; }
  size_t acc_shard_bytes(int64_t b) const { return static_cast<size_t>(shard(b)) * acc_es; }
  // The cost model's work of a task (sched::Plan::add_work).
  void work(sched::TaskId t, sched::Work w, double amount) { plan.add_work(t, w, amount); }
  // A task of `bytes` on the NVMe lane: its bytes, and one request's latency.
  void nvme_work(sched::TaskId t, sched::Work w, double bytes) {
    work(t, w, bytes);
    work(t, sched::Work::kNvmeOps, 1.0);
  }
  // A collective of `kind` over `count` 16-bit elements per rank (collective_work.h).
  void collective_work(sched::TaskId t, comm::CollectiveKind kind, size_t count) {
    comm::CollectiveCall call;
    call.kind = kind;
    call.count = count;
    call.dtype = dt;
    add_collective_work(plan, t, call, rank, ranks);
  }
  sched::BufferId add_buffer(Kind kind, std::string buffer_name, sched::Tier tier, uint64_t bytes,
                             bool initially_valid = false) {
    buffer_kind.push_back(kind);
    return plan.add_buffer(std::move(buffer_name), tier, bytes, initially_valid);
  }

  // Pinned host buffers. gfull: a block's whole gradient (padded), kept for the step at stages
  // 0-1 (the next run's update reads it), held from its transfer to its reduction at 2-3, where
  // gshard keeps the reduced shard (gfull by at(slot, block)). pbuf: the new parameters (padded;
  // the rank's shard is written by Adam, then all-gathered), or at stage 3 the rank's parameter
  // shard itself.
  std::vector<sched::BufferId> gfull, gshard;
  uint64_t pinned = 0, in_flight = 0, device_homes = 0;
  size_t largest = 0;
  uint64_t largest_moving = 0, largest_nvme = 0;  // shards not homed in pinned memory; on NVMe

  // The update (zero_plan_update.cpp). By block: the task after which its new parameters are
  // where its first use reads them (first_use[b] waits for `ready[b]`; -1: no update before).
  std::vector<sched::TaskId> ready;
  std::vector<sched::TaskId> grad_reader;  // by block: the update's task that reads its gradient
  std::vector<size_t> part_of;             // block -> partition
  uint64_t slot_bytes = 0;
  // The order the optimizer visits the partitions: forward order when rotated (the next forward
  // needs them that way), backward order otherwise (the gradients arrive that way).
  std::vector<size_t> visit;
  std::vector<sched::BufferId> staging;
  std::vector<sched::TaskId> read, state_written;
  // Transient new shards (stage 3, homed off pinned memory): by partition, the task that
  // acquires one (Adam, or the device optimizer's download) and the one that releases it.
  std::vector<sched::TaskId> shard_acquirer, shard_home;
  uint64_t largest_opt = 0;  // device optimizer: its largest partition (device bytes)
  std::vector<sched::TaskId> grad_up;
  std::vector<sched::BufferId> grad_up_buf;

  // The compute ops (stage 1 of the compiler, zero/plan/ops.h), their gathers (stage 2) and
  // the offloaded checkpoints' moves (stage 3); the lowering's state of each below.
  zero::OpList ops;
  std::vector<zero::Gather> gathers;
  std::vector<zero::CheckpointMove> ck_moves;
  // Device buffers: gathered copies (stage 3) and per-block gradients (stages 2-3).
  std::array<std::vector<sched::BufferId>, 2> gathered_dev, gathered_host;
  std::vector<sched::BufferId> dgrad;  // by at(slot, block)
  // The pointers an op passes the model: block b's parameters for phase ph (the gathered copy,
  // the device shard or the model's block) and its gradient of a slot (stages 2-3: dgrad).
  std::function<const void*(int64_t b, int ph, const sched::TaskContext&)> params;
  std::function<void*(int64_t b, int slot, const sched::TaskContext&)> grads;
  std::vector<sched::TaskId> upload;  // by gather: its upload task
  std::vector<sched::TaskId> op_task;
  size_t emitted = 0;                                      // gathers emitted so far
  std::vector<std::pair<size_t, sched::TaskId>> deferred;  // (op, gather that waits for it)

  // Offloaded activation checkpoints (zero_plan_checkpoints.cpp), by op: the checkpoints it
  // touches (seg, checkpoint, buffer, writes (acquiring), releases), those that go down and
  // come up after it.
  int64_t nseg = 0;
  Home act_home = Home::kDevice;
  size_t cb = 0;  // the model's checkpoint_bytes()
  struct CkUse {
    int64_t seg;  // the model's segment
    int64_t ck;   // the checkpoint (k * nseg + seg, micro-batch k)
    sched::BufferId buf;
    bool write, release;  // the writer acquires
  };
  std::vector<std::vector<CkUse>> ck_uses;
  std::vector<std::vector<int64_t>> ck_down_after, ck_up_after;
  // By checkpoint: its buffers and tasks.
  std::vector<sched::BufferId> ckf, ckb, ckh, ckr;
  std::vector<sched::TaskId> ck_up, ck_stored;

  std::vector<sched::TaskId> checks;  // by block: its gradient check
};

}  // namespace strata::engine
