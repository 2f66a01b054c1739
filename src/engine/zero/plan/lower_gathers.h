// Lowering of the gather schedule (gathers.h, stage 3): per gather the rank's shard fetched
// from its home (pinned memory: nothing; NVMe: read into pinned staging; the device: down into
// its slot of the gathered copy), the all-gather into the pinned landing buffer, and the upload
// into the device copy the ops read; with the collectives on the device (Layout::on_device) the
// shard up into its slot of the device copy and the all-gather there, so that 1/N of the block
// crosses to the device. At most `depth` gathers run ahead of the one in use; a
// gather waits for the new shard its update produced (UpdateTasks::ready) or, rotated with the
// shard on NVMe, reads the forward's new shard straight from the update's staging.
//
// Takes the layout, the schedule, the prefetch depth, the buffers (host_buffers.h,
// op_buffers.h), the update's tasks and the runtime the tasks act on. The op emission drives
// it: emit_upto() before an op's task, after_op() once the task exists.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "engine/zero/plan/builder.h"
#include "engine/zero/plan/gathers.h"
#include "engine/zero/plan/host_buffers.h"
#include "engine/zero/plan/layout.h"
#include "engine/zero/plan/op_buffers.h"
#include "engine/zero/plan/updates.h"
#include "engine/zero/runtime.h"

namespace strata::engine::zero {

class GatherLowering {
 public:
  GatherLowering(PlanBuilder& pb, const Layout& lay, std::vector<Gather> gathers, size_t depth,
                 const HostBuffers& hb, const OpBuffers& ob, const UpdateTasks& updates,
                 Runtime* rt);
  const std::vector<Gather>& schedule() const { return gathers_; }
  // Emits the gathers up to `need` (the ones the ops so far use) plus `depth` ahead; op_task
  // maps the ops emitted so far to their tasks.
  void emit_upto(size_t need, const std::vector<sched::TaskId>& op_task);
  // Op i's task t exists: the gathers emitted before it that wait for it.
  void after_op(size_t i, sched::TaskId t);
  // The task after which gather k's device copy is complete (the upload, or the device
  // all-gather).
  sched::TaskId upload(size_t k) const { return upload_[k]; }

 private:
  void emit(size_t k, const std::vector<sched::TaskId>& op_task);
  sched::TaskId on_device(size_t k, sched::BufferId sh, sched::BufferId staged, sched::TaskId fetch,
                          std::vector<sched::TaskId> deps);

  PlanBuilder& pb_;
  const Layout& lay_;
  std::vector<Gather> gathers_;
  size_t depth_;
  const HostBuffers& hb_;
  const OpBuffers& ob_;
  const UpdateTasks& updates_;
  Runtime* rt_;
  std::vector<sched::TaskId> upload_;                       // by gather
  size_t emitted_ = 0;                                      // gathers emitted so far
  std::vector<std::pair<size_t, sched::TaskId>> deferred_;  // (op, gather that waits for it)
};

}  // namespace strata::engine::zero
