// The ZeRO plan's budgets (sched::Budgets: the bytes the placement may use per tier) and the
// bound on its staging slots. Pinned: the step-long buffers, plus the working set: the NVMe
// staging slots (optimizer state, shards on their way home), the gradients awaiting reduction
// (the bucket), depth + 2 gathered blocks, and the offloaded checkpoints (all of them held in
// pinned memory; on NVMe four in staging, or 2 + 2K in the segment-major order of K
// micro-batches, whose K come up together). Device (stages 2-3, or with the device optimizer):
// the gradients of three blocks (the shared one is held through the backward; in the
// segment-major order one per micro-batch, from its head to its embedding backward, or with the
// device sum a checkpoint segment's layers', from the first micro-batch's backward to the
// last's), at stage 3 the gathered copies of depth + k + 2 blocks (a checkpointed segment of k
// layers stays gathered from its recompute to its backward), three (2 + K) checkpoints, the
// shards' device homes, the gradients kept on the device with their statistics, and the device
// optimizer's gradient and new-parameter buffers (two of each in flight).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/zero/plan/host_buffers.h"
#include "engine/zero/plan/layout.h"
#include "engine/zero/plan/updates.h"
#include "scheduler/plan.h"

namespace strata::engine::zero {

struct BudgetInput {
  size_t depth = 0;                 // prefetch_depth
  int staging_slots = 1;            // ZeroStepOptions::staging_slots
  int micros = 1;                   // K of the segment-major order (1 otherwise)
  int64_t checkpoint_interval = 0;  // layers per segment (0: no checkpoints)
  int64_t segments = 0;             // offloaded checkpoint segments
  uint64_t checkpoints = 0;         // offloaded checkpoints ((segment, micro-batch) pairs)
  Home checkpoint_home = Home::kDevice;
  size_t checkpoint_bytes = 0;
  bool gathers = false;      // the plan gathers (stage 3)
  uint64_t slot_bytes = 0;   // UpdateLowering::slot_bytes()
  uint64_t largest_opt = 0;  // UpdateLowering::largest_opt()
};

sched::Budgets plan_budgets(const Layout& lay, const HostBuffers& hb, const BudgetInput& in);

// At most staging_slots partitions' state in flight: each read waits for the write-back of the
// partition staging_slots before it in visit order. (The greedy placement would otherwise let
// reads take the room of other pinned buffers the updates need, and find no order that fits.)
// Likewise at most staging_slots new shards on their way home.
void bound_staging(sched::Plan& plan, const std::vector<size_t>& visit, const UpdateTasks& t,
                   int staging_slots);

}  // namespace strata::engine::zero
