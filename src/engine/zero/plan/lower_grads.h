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
// With the collectives on the device (Layout::on_device): the reduction on the device (stages
// 0-1 in a padded copy of the model's gradient, with stage 0's all-gather), then only the rank's
// reduced shard comes down (stage 0: the whole reduced gradient), and at stages 2-3 a host task
// adds it into the rank's shard as the comm task does otherwise. For the device optimizer's
// blocks (Layout::grads_on_device) nothing comes down: the reduced shard is kept, added up and
// checked on the device (Kernels::accumulate, grad_stats: the host check's bits), and only the
// statistics (16 bytes a shard) come down.
//
// Takes the layout, the buffers (host_buffers.h, op_buffers.h), the update lowering and
// the runtime the tasks act on (the communicator, the statistics, the fault-injection step).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/zero/plan/builder.h"
#include "engine/zero/plan/host_buffers.h"
#include "engine/zero/plan/layout.h"
#include "engine/zero/plan/op_buffers.h"
#include "engine/zero/plan/updates.h"
#include "engine/zero/runtime.h"

namespace strata::engine::zero {

class GradLowering {
 public:
  GradLowering(PlanBuilder& pb, const Layout& lay, const HostBuffers& hb, const OpBuffers& ob,
               UpdateLowering& updates, Runtime* rt);
  // The gradient of block gb (its slot `slot`) is complete after task t.
  void chain(int64_t gb, int slot, sched::TaskId t);
  // After the last check: the statistics exchange and the norm.
  void norm();

 private:
  // The reduction with the collectives on the host, and on the device (Layout::on_device): each
  // returns the task after which the rank's reduced shard (stage 0: the whole reduced gradient)
  // is where the check reads it.
  sched::TaskId reduce_on_host(int64_t gb, int slot, sched::TaskId t);
  sched::TaskId reduce_on_device(int64_t gb, int slot, sched::TaskId t);
  // The reduction of the collectives on the device: block gb's gradient (stages 0-1 in its
  // padded bucket, acquired here; stages 2-3 the op's buffer) reduced in `dbuf`, which the
  // caller's tasks release.
  sched::TaskId reduce_in_device_buffer(int64_t gb, int slot, sched::TaskId t,
                                        sched::BufferId& dbuf);
  // The last slot's check of block gb after `reduced` (and, not rotated, the block's update).
  void check(int64_t gb, int slot, sched::TaskId reduced);
  // Layout::grads_on_device: the reduction, then the reduced gradient kept (stage 0: in the
  // model's gradient block; stage 1: the rank's shard in HostBuffers::dgrad; stages 2-3: added
  // into it) and checked there.
  void keep_on_device(int64_t gb, int slot, sched::TaskId t);
  sched::TaskId check_on_device(int64_t gb, sched::BufferId src, DType cdt, sched::TaskId after);

  PlanBuilder& pb_;
  const Layout& lay_;
  const HostBuffers& hb_;
  const std::vector<sched::BufferId>& dgrad_;
  const std::vector<sched::BufferId>& dbucket_;
  UpdateLowering& updates_;
  Runtime* rt_;
  std::vector<sched::TaskId> checks_;       // by block
  std::vector<sched::TaskId> added_;        // by block: the last slot's shard added (on the device)
  std::vector<sched::TaskId> kept_checks_;  // the checks on the device
};

}  // namespace strata::engine::zero
