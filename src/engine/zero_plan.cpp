// ZeroStep::build_plan: the ZeRO step as one scheduler plan (zero_step.h describes what it
// does; this file and the other zero_plan*.cpp are how the tasks, buffers, dependencies and
// budgets say it). Here: the order of the parts, the pinned host buffers, the budgets and the
// staging-slot bounds. The parts share a ZeroStep::PlanBuild (zero_plan_build.h).
#include <algorithm>
#include <string>

#include "engine/zero_plan_build.h"

namespace strata::engine {

ZeroStep::PlanBuild::PlanBuild(ZeroStep& step)
    : parts(step.parts_),
      buffer_kind(step.buffer_kind_),
      task_when(step.task_when_),
      stage(step.options_.stage),
      layers(step.rt_->model.num_layers()),
      dt(step.rt_->model.dtype()),
      es(dtype_size(dt)),
      acc(step.options_.stage >= 2 && step.options_.fp32_grad_accum ? DType::kF32 : dt),
      acc_es(dtype_size(acc)),
      nb(step.blocks_.size()),
      slots(step.options_.stage >= 2 && !step.options_.device_grad_sum
                ? std::max(1, step.options_.layer_major_micros)
                : 1),
      rank(step.rt_->rank),
      ranks(step.rt_->ranks),
      delayed(step.options_.delayed_update_warmup >= 0),
      depth(static_cast<size_t>(step.options_.prefetch_depth)) {}

Result<sched::Plan> ZeroStep::build_plan() {
  buffer_kind_.clear();
  task_when_.clear();
  PlanBuild pb(*this);
  plan_host_buffers(pb);
  // The update of the previous step (rotated), in forward order: NVMe reads from the start of
  // the step, Adam per partition, the new shards all-gathered (stages 1-3, whole blocks) and
  // uploaded. first_use[b] waits for `ready[b]`.
  plan_state_reads(pb);
  if (rt_->device_opt && !(pb.ranks == 1 && pb.stage == 0)) {
    const sched::TaskId first = pb.next_task();
    for (size_t p : pb.visit) {
      if (rt_->device_opt->on_device(p)) add_grad_up(pb, p, {});
    }
    pb.runs_when(first, RunsWhen::kUpdate);
  }
  if (rotate_) {
    for (size_t p : pb.visit) pb.ready[size_t(blocks_[p])] = add_update(pb, p, {});
  }
  plan_ops(pb);
  plan_gathers(pb);
  plan_checkpoints(pb);
  emit_ops(pb);
  emit_norm(pb);
  const sched::Budgets budgets = plan_budgets(pb);
  bound_staging(pb);
  STRATA_RETURN_IF_ERROR(pb.plan.finalize(budgets).with_context("planning the ZeRO step"));
  task_when_.resize(pb.plan.num_tasks(), RunsWhen::kEvery);
  return std::move(pb.plan);
}

void ZeroStep::plan_host_buffers(PlanBuild& pb) {
  using sched::Tier;
  const size_t nb = pb.nb;
  const int stage = pb.stage;
  pb.gfull.assign(size_t(pb.slots) * nb, -1);
  pb.gshard.assign(nb, -1);
  pbuf_.assign(nb, -1);
  dshard_.assign(nb, -1);
  for (size_t b = 0; b < nb; ++b) {
    const int64_t bb = int64_t(b);
    pb.largest = std::max(pb.largest, pb.padded_bytes(bb));
    pb.gfull[b] = pb.add_buffer(stage <= 1 ? Kind::kGradWhole : Kind::kGradBucket,
                                "grad " + pb.name(bb), Tier::kPinnedHost, pb.padded_bytes(bb),
                                /*initially_valid=*/stage <= 1);
    if (stage >= 2) {
      pb.gshard[b] = pb.add_buffer(Kind::kHome, "grad shard " + pb.name(bb), Tier::kPinnedHost,
                                   pb.acc_shard_bytes(bb),
                                   /*initially_valid=*/true);
      pb.pinned += round_page(pb.acc_shard_bytes(bb));
    } else {
      pb.pinned += round_page(pb.padded_bytes(bb));
    }
    const bool sharded = sharded_params(bb);
    if (transient(bb)) {
      pbuf_[b] = pb.add_buffer(Kind::kParamStaging, "new param shard " + pb.name(bb),
                               Tier::kPinnedHost, pb.shard_bytes(bb));
      pb.largest_moving = std::max<uint64_t>(pb.largest_moving, round_page(pb.shard_bytes(bb)));
      if (home_[b] == Home::kNvme) {
        pb.largest_nvme = std::max<uint64_t>(pb.largest_nvme, round_page(pb.shard_bytes(bb)));
      }
      if (home_[b] == Home::kDevice) {
        dshard_[b] = pb.add_buffer(Kind::kHome, "param shard " + pb.name(bb) + " (device)",
                                   Tier::kDevice, pb.shard_bytes(bb), /*initially_valid=*/true);
        pb.device_homes += round_device(pb.shard_bytes(bb));
      }
      continue;
    }
    pbuf_[b] = pb.add_buffer(sharded ? Kind::kHome : Kind::kParamStaging,
                             sharded ? "param shard " + pb.name(bb) : "params " + pb.name(bb),
                             Tier::kPinnedHost, sharded ? pb.shard_bytes(bb) : pb.padded_bytes(bb),
                             /*initially_valid=*/sharded);
    pb.pinned += round_page(sharded ? pb.shard_bytes(bb) : pb.padded_bytes(bb));
  }
  // The other slots' gradients (segment-major at stages 2-3), after every block's first.
  for (int slot = 1; slot < pb.slots; ++slot) {
    for (size_t b = 0; b < nb; ++b) {
      pb.gfull[pb.at(slot, int64_t(b))] =
          pb.add_buffer(Kind::kGradBucket, "grad " + pb.name(int64_t(b)) + pb.slot_name(slot),
                        Tier::kPinnedHost, pb.padded_bytes(int64_t(b)));
    }
  }
  if (stage >= 2) {
    const uint64_t bucket = options_.bucket_bytes == 0 ? 2 * pb.largest : options_.bucket_bytes;
    pb.in_flight += std::max<uint64_t>(bucket, round_page(pb.largest));
  }
}

// Budgets: the whole-step buffers, plus the working set. Pinned: the NVMe staging slots, the
// gradients awaiting reduction (the bucket) and depth + 2 gathered blocks. Device (stages 2-3):
// the gradients of three blocks (the shared one is held through the backward; in the
// segment-major order one per micro-batch, from its head to its embedding backward, or with the
// device sum a checkpoint segment's layers', from the first micro-batch's backward to the
// last's) and, at stage 3,
// the gathered copies of depth + K + 2 blocks (a checkpointed segment of K layers stays gathered
// from its recompute to its backward).
sched::Budgets ZeroStep::plan_budgets(const PlanBuild& pb) const {
  using sched::Tier;
  const size_t depth = pb.depth;
  uint64_t largest_dev = 0;
  for (size_t b = 0; b < pb.nb; ++b) {
    largest_dev = std::max<uint64_t>(
        largest_dev, (static_cast<uint64_t>(pb.numel(int64_t(b))) * pb.es + 255) / 256 * 256);
  }
  sched::Budgets budgets;
  // Shards homed off pinned memory: staging_slots new shards on their way home, and the NVMe
  // reads of depth + 2 gathers.
  // Offloaded checkpoints: all of them held in pinned memory (cpu), or four in staging (nvme);
  // three on the device. Segment-major with K micro-batches: a segment's K come up together, so
  // 2 + 2K in staging and 2 + K on the device.
  const uint64_t ck_count = pb.ckf.size();  // (segment, micro-batch) pairs
  const uint64_t ck_micros = pb.nseg == 0 ? 0 : ck_count / uint64_t(pb.nseg);
  const uint64_t ck_pinned = pb.nseg == 0 ? 0
                             : pb.act_home == Home::kPinned
                                 ? ck_count * round_page(pb.cb)
                                 : (2 + 2 * ck_micros) * round_page(pb.cb);
  budgets.bytes[static_cast<int>(Tier::kPinnedHost)] =
      ck_pinned + pb.pinned + pb.in_flight +
      static_cast<uint64_t>(options_.staging_slots) * (pb.slot_bytes + pb.largest_moving) +
      (pb.gathers.empty() ? 0 : (depth + 2) * (round_page(pb.largest) + pb.largest_nvme));
  // The device optimizer's gradient and new-parameter buffers: two of each in flight.
  if (pb.stage >= 2 || pb.largest_opt > 0) {
    const uint64_t k = static_cast<uint64_t>(rt_->model.checkpoint_interval());
    const uint64_t segment = k == 0 ? uint64_t(pb.layers) : k;
    const uint64_t grads = options_.layer_major_micros <= 1 ? 3
                           : pb.slots > 1                   ? 2 + uint64_t(pb.slots)
                                                            : 2 + segment;
    budgets.bytes[static_cast<int>(Tier::kDevice)] =
        (pb.nseg == 0 ? 0 : (2 + ck_micros) * round_device(pb.cb)) + pb.device_homes +
        (pb.stage >= 2 ? grads * largest_dev : 0) +
        (pb.gathers.empty() ? 0 : (depth + k + 2) * largest_dev) + 4 * pb.largest_opt;
  }
  return budgets;
}

// At most staging_slots partitions' state in flight: each read waits for the write-back of the
// partition staging_slots before it in visit order. (The greedy placement would otherwise let
// reads take the room of other pinned buffers the updates need, and find no order that fits.)
// Likewise at most staging_slots new shards on their way home.
void ZeroStep::bound_staging(PlanBuild& pb) {
  const auto slots = static_cast<size_t>(options_.staging_slots);
  auto bound = [&](const std::vector<sched::TaskId>& acquirer,
                   const std::vector<sched::TaskId>& releaser) {
    std::vector<size_t> order;
    for (size_t p : pb.visit) {
      if (acquirer[p] >= 0 && releaser[p] >= 0) order.push_back(p);
    }
    for (size_t i = slots; i < order.size(); ++i) {
      pb.plan.depend(acquirer[order[i]], releaser[order[i - slots]]);
    }
  };
  bound(pb.read, pb.state_written);
  bound(pb.shard_acquirer, pb.shard_home);
}

}  // namespace strata::engine
