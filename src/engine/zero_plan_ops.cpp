// ZeroStep::build_plan, the compute side: the list of the step's compute ops with the device
// buffers they use, and the loop that emits them (each op's task after the gathers ahead of it,
// with its dependencies on updates, gathered copies and checkpoints; then its gradient's chain,
// zero_plan_grads.cpp).
#include <algorithm>
#include <array>
#include <functional>
#include <string>

#include "core/check.h"
#include "engine/zero_plan_build.h"

namespace strata::engine {

using sched::BufferId;
using sched::Lane;
using sched::TaskContext;
using sched::TaskId;
using sched::Tier;

// The device buffers of the ops (the gradients at stages 2-3, the gathered copies at stage 3),
// the pointers they pass the model, and the op list (stage 1, zero/plan/ops.h).
void ZeroStep::plan_ops(PlanBuild& pb) {
  model::Model& m = rt_->model;
  const int stage = pb.stage;
  const size_t nb = pb.nb;
  for (auto* v :
       {&pb.gathered_dev[0], &pb.gathered_dev[1], &pb.gathered_host[0], &pb.gathered_host[1]}) {
    v->assign(nb, -1);
  }
  pb.dgrad.assign(size_t(pb.slots) * nb, -1);
  for (size_t b = 0; b < nb; ++b) {
    const int64_t bb = int64_t(b);
    if (stage >= 2) {
      pb.dgrad[b] = pb.add_buffer(Kind::kGradBucket, "grad " + pb.name(bb) + " (device)",
                                  Tier::kDevice, static_cast<size_t>(pb.numel(bb)) * pb.es);
    }
    if (!gathered(bb)) continue;
    for (int ph = 0; ph < 2; ++ph) {
      const std::string suffix = ph == 0 ? " (forward)" : " (backward)";
      pb.gathered_host[ph][b] = pb.add_buffer(Kind::kGathered, "gathered " + pb.name(bb) + suffix,
                                              Tier::kPinnedHost, pb.padded_bytes(bb));
      pb.gathered_dev[ph][b] =
          pb.add_buffer(Kind::kGathered, "gathered " + pb.name(bb) + suffix + " (device)",
                        Tier::kDevice, static_cast<size_t>(pb.numel(bb)) * pb.es);
    }
  }
  for (int slot = 1; slot < pb.slots; ++slot) {  // the other micro-batches' (segment-major)
    for (size_t b = 0; b < nb; ++b) {
      const int64_t bb = int64_t(b);
      pb.dgrad[pb.at(slot, bb)] =
          pb.add_buffer(Kind::kGradBucket, "grad " + pb.name(bb) + pb.slot_name(slot) + " (device)",
                        Tier::kDevice, static_cast<size_t>(pb.numel(bb)) * pb.es);
    }
  }
  // The buffer block b's phase-ph op reads: its gathered copy, its shard used in place (a device
  // shard of one rank), or none (-1: the model's own block).
  std::array<std::vector<BufferId>, 2> reads;
  for (int ph = 0; ph < 2; ++ph) {
    for (size_t b = 0; b < nb; ++b) {
      const int64_t bb = int64_t(b);
      reads[ph].push_back(gathered(bb)         ? pb.gathered_dev[ph][b]
                          : sharded_params(bb) ? dshard_[b]
                                               : -1);
    }
  }
  pb.params = [&m, reads](int64_t b, int ph, const TaskContext& c) -> const void* {
    const BufferId id = reads[ph][size_t(b)];
    return id >= 0 ? c.buffer(id) : m.param_block(b);
  };
  pb.grads = [&m, dgrad = pb.dgrad, nb](int64_t b, int slot, const TaskContext& c) -> void* {
    const sched::BufferId g = dgrad[static_cast<size_t>(slot) * nb + size_t(b)];
    return g >= 0 ? c.buffer(g) : m.grad_block(b);
  };
  zero::OpInput in;
  in.layers = pb.layers;
  for (int64_t seg = 0; seg < m.num_segments(); ++seg) {
    in.segments.emplace_back(m.segment_begin(seg), m.segment_end(seg));
  }
  for (size_t b = 0; b < nb; ++b) {
    const model::BlockCost cost = m.block_cost(int64_t(b));
    in.forward_flops.push_back(cost.forward_flops);
    in.backward_flops.push_back(cost.backward_flops);
    in.sharded.push_back(sharded_params(int64_t(b)));
  }
  in.stage = stage;
  in.micros = std::max(1, options_.layer_major_micros);
  in.device_sum = stage <= 1 || (in.micros > 1 && options_.device_grad_sum);
  pb.ops = zero::make_ops(in);
  STRATA_CHECK(pb.ops.slots == pb.slots, "ZeRO plan: gradient slots disagree");
}

// What op's task asks of the model.
ZeroStep::OpBody ZeroStep::op_body(const PlanBuild& pb, const zero::Op& op) {
  model::Model& m = rt_->model;
  const auto& params = pb.params;
  const auto& grads = pb.grads;
  const int64_t b = op.block;
  const int g = op.slot;
  switch (op.kind) {
    case zero::OpKind::kZeroGrads:
      // Stages 0-1: the model's gradients, zeroed before the first micro-batch only (the
      // others add to them).
      return [&m, stage = pb.stage](gpu::Stream& s, const TaskContext& c) -> Status {
        if (stage >= 2 || c.args<zero::Replay>().micro > 0) return ok_status();
        for (int64_t blk = 0; blk < m.num_blocks(); ++blk) {
          STRATA_RETURN_IF_ERROR(
              s.memset(m.grad_block(blk), 0,
                       static_cast<size_t>(m.block_numel(blk)) * dtype_size(m.dtype())));
        }
        return ok_status();
      };
    case zero::OpKind::kSetBatch: {
      const size_t at = size_t(op.micro) * (rt_->tokens.size() / size_t(pb.ops.micros));
      return [rt = rt_.get(), at](gpu::Stream& s, const TaskContext&) {
        return rt->model.set_batch(s, rt->tokens.data() + at, rt->targets.data() + at);
      };
    }
    case zero::OpKind::kEmbeddingForward:
      return [&m, params, b](gpu::Stream& s, const TaskContext& c) {
        return m.embedding_forward(s, params(b, 0, c));
      };
    case zero::OpKind::kLayerForward:
      return [&m, params, b](gpu::Stream& s, const TaskContext& c) {
        return m.layer_forward(s, b, params(b, 0, c));
      };
    case zero::OpKind::kHeadForward:
      return [&m, params, b](gpu::Stream& s, const TaskContext& c) {
        return m.head_forward(s, params(b, 0, c));
      };
    case zero::OpKind::kHeadBackward:
      return [&m, params, grads, b, g](gpu::Stream& s, const TaskContext& c) {
        return m.head_backward(s, params(b, 0, c), grads(b, g, c));
      };
    case zero::OpKind::kLayerRecompute:
      return [&m, params, b](gpu::Stream& s, const TaskContext& c) {
        return m.layer_recompute(s, b, params(b, 1, c));
      };
    case zero::OpKind::kLayerBackward:
      return [&m, params, grads, b, g](gpu::Stream& s, const TaskContext& c) {
        return m.layer_backward(s, b, params(b, 1, c), grads(b, g, c));
      };
    case zero::OpKind::kEmbeddingBackward:
      return [&m, grads, b, g](gpu::Stream& s, const TaskContext& c) {
        return m.embedding_backward(s, grads(b, g, c));
      };
    case zero::OpKind::kFoldHeadGradient:
      // After the last micro-batch's embedding backward, a tied head's gradient kept apart over
      // the micro-batches joins the embedding's (nothing when it is not kept apart).
      return [&m, grads, b](gpu::Stream& s, const TaskContext& c) -> Status {
        if (!c.args<zero::Replay>().last_micro()) return ok_status();
        return m.fold_head_grads(s, grads(b, 0, c));
      };
  }
  return {};
}

// Emit the compute ops, the gathers ahead of them, and after each gradient: its transfer to
// pinned memory, its reduction (comm) and its check (cpu).
void ZeroStep::emit_ops(PlanBuild& pb) {
  pb.checks.assign(pb.nb, -1);
  size_t need = 0;  // gathers [0, need) are used by the ops so far
  for (size_t i = 0; i < pb.ops.ops.size(); ++i) {
    const zero::Op& op = pb.ops.ops[i];
    for (const auto& [b, ph] : op.uses) {
      if (gathered(b)) need = std::max(need, zero::find_gather(pb.gathers, b, ph) + 1);
    }
    if (need > 0) {
      const size_t upto = std::min(pb.gathers.size(), need + pb.depth);
      while (pb.emitted < upto) emit_gather(pb, pb.emitted++);
    }
    const TaskId t = add_op_task(pb, i);
    emit_checkpoint_moves(pb, i, t);
    order_op(pb, i, t);
    // The gradient of block grad_done is complete: down, reduce, check.
    if (op.grad_done >= 0) emit_grad_chain(pb, op.grad_done, op.slot, t);
  }
}

// Op i's task (after zeroing the gradient it starts, stages 2-3), with its checkpoints' uses.
TaskId ZeroStep::add_op_task(PlanBuild& pb, size_t i) {
  model::Model& m = rt_->model;
  sched::Plan& plan = pb.plan;
  const zero::Op& op = pb.ops.ops[i];
  if (op.zero_grad >= 0) {
    const BufferId dg = pb.dgrad[pb.at(op.slot, op.zero_grad)];
    const size_t bytes = static_cast<size_t>(pb.numel(op.zero_grad)) * pb.es;
    const TaskId z =
        plan.add("zero grad " + pb.name(op.zero_grad) + pb.slot_name(op.slot), Lane::kCompute,
                 [rt = rt_.get(), dg, bytes](const TaskContext& c) -> Status {
                   if (c.args<zero::Replay>().flushing) return ok_status();
                   return c.stream->memset(c.buffer(dg), 0, bytes);
                 });
    plan.acquire(z, dg);
    plan.writes(z, dg);
  }
  OpBody fn = op_body(pb, op);
  std::vector<std::pair<int64_t, BufferId>> cks;  // the offloaded checkpoints it touches
  for (const PlanBuild::CkUse& u : pb.ck_uses[i]) cks.emplace_back(u.seg, u.buf);
  const int micro = pb.ops.micros > 1 ? op.micro : -1;
  const TaskId t = plan.add(op.name, Lane::kCompute,
                            [rt = rt_.get(), &m, fn, cks, micro](const TaskContext& c) -> Status {
                              if (c.args<zero::Replay>().flushing) return ok_status();
                              // Segment-major: the op's micro-batch's model slot, before its
                              // checkpoints (a slot's kept inputs are its own).
                              if (micro >= 0) STRATA_RETURN_IF_ERROR(m.select_micro(micro));
                              for (const auto& [seg, buf] : cks)
                                STRATA_RETURN_IF_ERROR(m.set_checkpoint(seg, c.buffer(buf)));
                              return fn(*c.stream, c);
                            });
  pb.op_task[i] = t;
  if (op.flops > 0.0) pb.work(t, op.work, op.flops);
  for (const PlanBuild::CkUse& u : pb.ck_uses[i]) {
    if (u.write) {
      plan.acquire(t, u.buf);
      plan.writes(t, u.buf);
    } else {
      plan.reads(t, u.buf);
      if (pb.ck_up[size_t(u.ck)] >= 0 && u.buf == pb.ckb[size_t(u.ck)]) {
        plan.depend(t, pb.ck_up[size_t(u.ck)]);
      }
    }
    if (u.release) plan.release(t, u.buf);
  }
  return t;
}

// Op i's task t in the plan: the gathers that wait for it, the updates it waits for (or that
// wait for it, delayed), the gathered copies it reads, the gradients it writes.
void ZeroStep::order_op(PlanBuild& pb, size_t i, TaskId t) {
  sched::Plan& plan = pb.plan;
  const zero::Op& op = pb.ops.ops[i];
  const std::vector<TaskId>& ready = pb.ready;
  for (const auto& [after, gather] : pb.deferred) {
    if (after == i) plan.depend(gather, t);
  }
  if (!pb.delayed && op.first_use_of >= 0 && ready[size_t(op.first_use_of)] >= 0 &&
      !gathered(op.first_use_of)) {
    plan.depend(t, ready[size_t(op.first_use_of)]);
  }
  // Delayed: a block's new parameters go up after this step's last use of the old ones.
  for (size_t b = 0; pb.delayed && b < pb.nb; ++b) {
    if (pb.ops.last_read[b] == i && ready[b] >= 0) plan.depend(ready[b], t);
  }
  for (const auto& [b, ph] : op.uses) {
    if (!gathered(b)) {  // a device shard used in place (one rank)
      plan.reads(t, dshard_[size_t(b)]);
      if (ready[size_t(b)] >= 0) plan.depend(t, ready[size_t(b)]);
      continue;
    }
    const size_t k = zero::find_gather(pb.gathers, b, ph);
    const zero::Gather& gt = pb.gathers[k];
    plan.depend(t, pb.upload[k]);
    plan.reads(t, pb.gathered_dev[ph][size_t(b)]);
    if (gt.last == i) plan.release(t, pb.gathered_dev[ph][size_t(b)]);
  }
  const int64_t gb = op.grad_done;
  if (pb.stage >= 2) {
    if (op.zero_grad >= 0) plan.writes(t, pb.dgrad[pb.at(op.slot, op.zero_grad)]);
    if (gb >= 0 && gb != op.zero_grad) plan.writes(t, pb.dgrad[pb.at(op.slot, gb)]);
    if (op.adds_grad >= 0) plan.writes(t, pb.dgrad[pb.at(op.slot, op.adds_grad)]);
    // The shared block's gradient is also written between head and embedding backward.
    if (gb == pb.layers) plan.reads(t, pb.dgrad[pb.at(op.slot, pb.layers)]);
  }
}

}  // namespace strata::engine
