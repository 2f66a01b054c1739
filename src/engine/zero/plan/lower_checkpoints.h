// Lowering of the offloaded checkpoints' moves (checkpoints.h): per checkpoint its device
// buffers (the forward copy its writer fills, the backward copy it comes back into) and pinned
// ones (its copy down; with NVMe, the copy read back), the accesses of the ops that touch it, and
// after the ops that trigger them its tasks: down (d2h) and on to NVMe after its forward reader,
// back (from NVMe and h2d) after its trigger.
//
// Takes the moves, the number of ops, the checkpoints' home (kPinned or kNvme) and size, and
// the runtime the tasks act on (the swap store and its keys).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/engine_config.h"
#include "engine/zero/plan/builder.h"
#include "engine/zero/plan/checkpoints.h"
#include "engine/zero/runtime.h"

namespace strata::engine::zero {

class CheckpointLowering {
 public:
  // A checkpoint an op touches: its segment, index, the buffer, whether the op writes it
  // (acquiring it) and whether it releases it.
  struct Use {
    int64_t seg;
    int64_t ck;
    sched::BufferId buf;
    bool write, release;
  };
  // Adds every checkpoint's buffers, in move order.
  CheckpointLowering(PlanBuilder& pb, std::vector<CheckpointMove> moves, size_t num_ops, Home home,
                     size_t bytes, Runtime* rt);
  const std::vector<Use>& uses(size_t op) const { return uses_[op]; }
  // Op `op`'s task t: its accesses of the checkpoints it touches.
  void declare(size_t op, sched::TaskId t);
  // After op `op` (task t): the moves it triggers; op_task maps ops to their tasks so far.
  void after(size_t op, sched::TaskId t, const std::vector<sched::TaskId>& op_task);
  size_t count() const { return moves_.size(); }  // (segment, micro-batch) pairs

 private:
  PlanBuilder& pb_;
  std::vector<CheckpointMove> moves_;
  Home home_;
  size_t bytes_;
  Runtime* rt_;
  std::vector<std::vector<Use>> uses_;                         // by op
  std::vector<std::vector<int64_t>> down_after_, up_after_;    // by op
  std::vector<sched::BufferId> fwd_, bwd_, host_, from_nvme_;  // by checkpoint
  std::vector<sched::TaskId> up_, stored_;                     // by checkpoint
};

}  // namespace strata::engine::zero
