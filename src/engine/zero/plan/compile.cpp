#include "engine/zero/plan/compile.h"

#include <utility>

#include "engine/zero/plan/budgets.h"
#include "engine/zero/plan/checkpoints.h"
#include "engine/zero/plan/gathers.h"
#include "engine/zero/plan/lower_checkpoints.h"
#include "engine/zero/plan/lower_gathers.h"
#include "engine/zero/plan/lower_grads.h"
#include "engine/zero/plan/lower_ops.h"
#include "engine/zero/plan/op_buffers.h"
#include "engine/zero/plan/updates.h"

namespace strata::engine::zero {

Result<Compiled> compile(const CompileInput& in) {
  const Layout& lay = *in.layout;
  Compiled out;
  PlanBuilder& pb = out.built;
  out.host = lower_host_buffers(pb, lay, in.bucket_bytes);
  // The update of the previous step (rotated), in visit order: NVMe reads from the start of the
  // step, the device optimizer's gradients up, Adam per partition, the new shards all-gathered
  // (stages 1-3, whole blocks) and uploaded.
  UpdateLowering updates(pb, lay, out.host, in.rt);
  updates.lower_state_reads();
  updates.lower_grad_ups();
  if (lay.rotate) updates.lower_rotated();
  const OpList ops = make_ops(in.ops);
  const OpBuffers ob = lower_op_buffers(pb, lay);
  std::vector<bool> gathered(lay.nb());
  for (size_t b = 0; b < lay.nb(); ++b) gathered[b] = lay.gathered(int64_t(b));
  GatherLowering gathers(pb, lay, schedule_gathers(ops.ops, gathered), in.depth, out.host, ob,
                         updates.tasks(), in.rt);
  std::vector<int64_t> begin;
  for (const auto& seg : in.ops.segments) begin.push_back(seg.first);
  CheckpointLowering checkpoints(
      pb, plan_checkpoint_moves(ops.ops, begin, in.offloaded_segments, ops.micros, lay.layers),
      ops.ops.size(), in.checkpoint_home, in.checkpoint_bytes, in.rt);
  GradLowering grads(pb, lay, out.host, ob, updates, in.rt);
  lower_ops(pb, lay, ops, ob, out.host, updates.tasks(), {gathers, checkpoints, grads}, in.rt);
  grads.norm();
  BudgetInput bi;
  bi.depth = in.depth;
  bi.staging_slots = in.staging_slots;
  bi.micros = ops.micros;
  bi.checkpoint_interval = in.checkpoint_interval;
  bi.segments = in.offloaded_segments;
  bi.checkpoints = checkpoints.count();
  bi.checkpoint_home = in.checkpoint_home;
  bi.checkpoint_bytes = in.checkpoint_bytes;
  bi.gathers = !gathers.schedule().empty();
  bi.slot_bytes = updates.slot_bytes();
  bi.largest_opt = updates.largest_opt();
  const sched::Budgets budgets = plan_budgets(lay, out.host, bi);
  bound_staging(pb.plan, updates.visit(), updates.tasks(), in.staging_slots);
  STRATA_RETURN_IF_ERROR(pb.plan.finalize(budgets).with_context("planning the ZeRO step"));
  pb.notes.when.resize(pb.plan.num_tasks(), RunsWhen::kEvery);
  return out;
}

}  // namespace strata::engine::zero
