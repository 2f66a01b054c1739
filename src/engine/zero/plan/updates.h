// Stage 5 of the ZeRO plan compiler, the update tasks: the NVMe reads of the optimizer state, the
// update of a partition (the CPU Adam, or the device optimizer with its gradient up and its new
// values down, or kept on the device: Layout::new_params_on_device) and the way of its new
// parameters to their next use (all-gathered and uploaded into the model's block, or the new
// shard to its home). Takes the layout, the step-long buffers
// (host_buffers.h) and the runtime the tasks act on (the optimizer: which partitions are on NVMe
// or the device, their sizes). The visit order: forward order when rotated (the next forward
// needs the blocks that way), else backward order (the gradients arrive that way; delayed too:
// the new parameters go up after the backward's last use of each block).
//
// When: rotated, every partition's update at the start of the plan (lower_rotated); otherwise
// each after its own gradient check (the gradient lowering calls add()). Every task of an update
// does its work only in a replay that applies one (RunsWhen::kUpdate).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/zero/plan/builder.h"
#include "engine/zero/plan/host_buffers.h"
#include "engine/zero/plan/layout.h"
#include "engine/zero/runtime.h"

namespace strata::engine::zero {

// The update's tasks the rest of the plan orders itself by (-1: none).
struct UpdateTasks {
  // By block: the task after which its new parameters are where its first use reads them, and
  // the update's task that reads its gradient.
  std::vector<sched::TaskId> ready, grad_reader;
  // By partition: for a transient shard the task that acquires its staging (Adam, or the device
  // optimizer's download) and the one that releases it (at its home); the NVMe state's read and
  // write-back.
  std::vector<sched::TaskId> shard_acquirer, shard_home, read, state_written;
};

class UpdateLowering {
 public:
  UpdateLowering(PlanBuilder& pb, const Layout& lay, const HostBuffers& hb, Runtime* rt);
  // The NVMe state reads, in visit order, from the start of the step.
  void lower_state_reads();
  // The device optimizer's gradients up, every partition's before any new parameters go up (so
  // that the in-order h2d lane does not hold a gradient behind a whole update).
  void lower_grad_ups();
  // Rotated: every partition's update, in visit order; ready[] from them.
  void lower_rotated();
  // Partition p's update after `deps`; returns the task after which its block's new
  // parameters are where their next use reads them.
  sched::TaskId add(size_t p, std::vector<sched::TaskId> deps);

  const std::vector<size_t>& visit() const { return visit_; }
  const UpdateTasks& tasks() const { return t_; }
  uint64_t slot_bytes() const { return slot_bytes_; }    // the largest NVMe state (staged)
  uint64_t largest_opt() const { return largest_opt_; }  // the device optimizer's largest

 private:
  sched::TaskId add_tasks(size_t p, std::vector<sched::TaskId> deps);
  sched::TaskId add_device(size_t p, std::vector<sched::TaskId> deps);
  void add_grad_up(size_t p, std::vector<sched::TaskId> deps);
  sched::TaskId params_up(int64_t b, sched::TaskId after);
  sched::TaskId params_up_on_device(int64_t b, sched::TaskId after);
  // Block b's padded device copy for its new parameters (device collectives).
  sched::BufferId device_copy(int64_t b);
  // After `after` wrote the rank's new shard into its slot of d (device_copy): all-gathered on
  // the device, then copied into the model's block; d released.
  sched::TaskId gather_on_device(int64_t b, sched::BufferId d, sched::TaskId after);
  sched::TaskId finish_shard(int64_t b, sched::TaskId after);
  sched::TaskId to_next_use(size_t p, int64_t b, sched::TaskId after);

  PlanBuilder& pb_;
  const Layout& lay_;
  const HostBuffers& hb_;
  Runtime* rt_;
  std::vector<size_t> visit_;
  std::vector<sched::BufferId> staging_;      // by partition: its NVMe state
  std::vector<sched::TaskId> grad_up_;        // by partition (device optimizer)
  std::vector<sched::BufferId> grad_up_buf_;  // by partition
  uint64_t slot_bytes_ = 0, largest_opt_ = 0;
  UpdateTasks t_;
};

}  // namespace strata::engine::zero
