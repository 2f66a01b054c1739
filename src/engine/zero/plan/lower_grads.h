// Stage 4 of the ZeRO plan compiler, the gradient chains: after the op that completes a block's
// gradient (of a slot), its transfer to pinned memory (d2h), its reduction (comm: a
// reduce-scatter; at stage 0 the all-gather that makes it an all-reduce) and, after the last
// slot's, its check (cpu: the sums of squares and non-finite flags of the shards this rank
// holds), then, not rotated, the block's update (updates.h). After every check: the statistics
// exchange (stages 1-3) and the norm. With gradient accumulation, stages 0-1 move and reduce the
// gradients after the last micro-batch only; stages 2-3 reduce every micro-batch's and add the
// shard into the rank's (in fp32 with fp32_grad_accum); the checks and the norm run after the
// last.
//
// Takes the layout, the buffers (host_buffers.h, op_buffers.h' dgrad), the update lowering and
// the runtime the tasks act on (the communicator, the statistics, the fault-injection step).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/zero/plan/builder.h"
#include "engine/zero/plan/host_buffers.h"
#include "engine/zero/plan/layout.h"
#include "engine/zero/plan/updates.h"
#include "engine/zero/runtime.h"

namespace strata::engine::zero {

class GradLowering {
 public:
  GradLowering(PlanBuilder& pb, const Layout& lay, const HostBuffers& hb,
               const std::vector<sched::BufferId>& dgrad, UpdateLowering& updates, Runtime* rt);
  // The gradient of block gb (its slot `slot`) is complete after task t.
  void chain(int64_t gb, int slot, sched::TaskId t);
  // After the last check: the statistics exchange and the norm.
  void norm();

 private:
  PlanBuilder& pb_;
  const Layout& lay_;
  const HostBuffers& hb_;
  const std::vector<sched::BufferId>& dgrad_;
  UpdateLowering& updates_;
  Runtime* rt_;
  std::vector<sched::TaskId> checks_;  // by block
};

}  // namespace strata::engine::zero
