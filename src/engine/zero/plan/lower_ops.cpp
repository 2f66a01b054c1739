#include "engine/zero/plan/lower_ops.h"

#include <algorithm>
#include <array>
#include <functional>
#include <string>
#include <utility>

namespace strata::engine::zero {

using sched::BufferId;
using sched::Lane;
using sched::TaskContext;
using sched::TaskId;

namespace {

using OpBody = std::function<Status(gpu::Stream&, const TaskContext&)>;

// The pointers an op passes the model: block b's parameters for phase ph (its gathered copy,
// its device shard used in place, or the model's block) and its gradient of a slot (stages 2-3:
// dgrad; else the model's).
struct OpPointers {
  std::array<std::vector<BufferId>, 2> reads;  // by phase, block (-1: the model's block)
  std::vector<BufferId> dgrad;
  size_t nb = 0;
  const void* params(model::Model& m, int64_t b, int ph, const TaskContext& c) const {
    const BufferId id = reads[ph][size_t(b)];
    return id >= 0 ? c.buffer(id) : m.param_block(b);
  }
  void* grads(model::Model& m, int64_t b, int slot, const TaskContext& c) const {
    const BufferId g = dgrad[static_cast<size_t>(slot) * nb + size_t(b)];
    return g >= 0 ? c.buffer(g) : m.grad_block(b);
  }
};

// What op's task asks of the model.
OpBody op_body(const Op& op, const OpList& ops, int stage, Runtime* rt,
               std::shared_ptr<const OpPointers> ptr) {
  const int64_t b = op.block;
  const int g = op.slot;
  switch (op.kind) {
    case OpKind::kZeroGrads:
      // Stages 0-1: the model's gradients, zeroed before the first micro-batch only (the
      // others add to them).
      return [rt, stage](gpu::Stream& s, const TaskContext& c) -> Status {
        model::Model& m = rt->model;
        if (stage >= 2 || c.args<Replay>().micro > 0) return ok_status();
        for (int64_t blk = 0; blk < m.num_blocks(); ++blk) {
          STRATA_RETURN_IF_ERROR(
              s.memset(m.grad_block(blk), 0,
                       static_cast<size_t>(m.block_numel(blk)) * dtype_size(m.dtype())));
        }
        return ok_status();
      };
    case OpKind::kSetBatch: {
      const size_t at = size_t(op.micro) * (rt->tokens.size() / size_t(ops.micros));
      return [rt, at](gpu::Stream& s, const TaskContext&) {
        return rt->model.set_batch(s, rt->tokens.data() + at, rt->targets.data() + at);
      };
    }
    case OpKind::kEmbeddingForward:
      return [rt, ptr, b](gpu::Stream& s, const TaskContext& c) {
        return rt->model.embedding_forward(s, ptr->params(rt->model, b, 0, c));
      };
    case OpKind::kLayerForward:
      return [rt, ptr, b](gpu::Stream& s, const TaskContext& c) {
        return rt->model.layer_forward(s, b, ptr->params(rt->model, b, 0, c));
      };
    case OpKind::kHeadForward:
      return [rt, ptr, b](gpu::Stream& s, const TaskContext& c) {
        return rt->model.head_forward(s, ptr->params(rt->model, b, 0, c));
      };
    case OpKind::kHeadBackward:
      return [rt, ptr, b, g](gpu::Stream& s, const TaskContext& c) {
        return rt->model.head_backward(s, ptr->params(rt->model, b, 0, c),
                                       ptr->grads(rt->model, b, g, c));
      };
    case OpKind::kLayerRecompute:
      return [rt, ptr, b](gpu::Stream& s, const TaskContext& c) {
        return rt->model.layer_recompute(s, b, ptr->params(rt->model, b, 1, c));
      };
    case OpKind::kLayerBackward:
      return [rt, ptr, b, g](gpu::Stream& s, const TaskContext& c) {
        return rt->model.layer_backward(s, b, ptr->params(rt->model, b, 1, c),
                                        ptr->grads(rt->model, b, g, c));
      };
    case OpKind::kEmbeddingBackward:
      return [rt, ptr, b, g](gpu::Stream& s, const TaskContext& c) {
        return rt->model.embedding_backward(s, ptr->grads(rt->model, b, g, c));
      };
    case OpKind::kFoldHeadGradient:
      // After the last micro-batch's embedding backward, a tied head's gradient kept apart over
      // the micro-batches joins the embedding's (nothing when it is not kept apart).
      return [rt, ptr, b](gpu::Stream& s, const TaskContext& c) -> Status {
        if (!c.args<Replay>().last_micro()) return ok_status();
        return rt->model.fold_head_grads(s, ptr->grads(rt->model, b, 0, c));
      };
  }
  return {};
}

// Op i's task (after zeroing the gradient it starts, stages 2-3), with its checkpoints' uses.
TaskId add_op_task(PlanBuilder& pb, const Layout& lay, const OpList& ops, size_t i,
                   const OpBuffers& ob, CheckpointLowering& cks, Runtime* rt,
                   const std::shared_ptr<const OpPointers>& ptr) {
  sched::Plan& plan = pb.plan;
  const Op& op = ops.ops[i];
  if (op.zero_grad >= 0) {
    const BufferId dg = ob.dgrad[lay.at(op.slot, op.zero_grad)];
    // With the collectives on the device, the padding too (the reduction reads it).
    const size_t bytes =
        lay.on_device ? lay.padded_bytes(op.zero_grad) : lay.block_bytes(op.zero_grad);
    const TaskId z = plan.add("zero grad " + lay.name(op.zero_grad) + lay.slot_name(op.slot),
                              Lane::kCompute, [dg, bytes](const TaskContext& c) -> Status {
                                if (c.args<Replay>().flushing) return ok_status();
                                return c.stream->memset(c.buffer(dg), 0, bytes);
                              });
    plan.acquire(z, dg);
    plan.writes(z, dg);
  }
  OpBody fn = op_body(op, ops, lay.stage, rt, ptr);
  std::vector<std::pair<int64_t, BufferId>> set;  // the offloaded checkpoints it touches
  for (const CheckpointLowering::Use& u : cks.uses(i)) set.emplace_back(u.seg, u.buf);
  const int micro = ops.micros > 1 ? op.micro : -1;
  const TaskId t =
      plan.add(op.name, Lane::kCompute, [rt, fn, set, micro](const TaskContext& c) -> Status {
        if (c.args<Replay>().flushing) return ok_status();
        // Segment-major: the op's micro-batch's model slot, before its checkpoints (a slot's
        // kept inputs are its own).
        if (micro >= 0) STRATA_RETURN_IF_ERROR(rt->model.select_micro(micro));
        for (const auto& [seg, buf] : set)
          STRATA_RETURN_IF_ERROR(rt->model.set_checkpoint(seg, c.buffer(buf)));
        return fn(*c.stream, c);
      });
  if (op.flops > 0.0) pb.work(t, op.work, op.flops);
  cks.declare(i, t);
  return t;
}

// Op i's task t in the plan: the updates it waits for (or that wait for it, delayed), the
// gathered copies it reads, the gradients it writes.
void order_op(PlanBuilder& pb, const Layout& lay, const OpList& ops, size_t i, TaskId t,
              const OpBuffers& ob, const HostBuffers& hb, const UpdateTasks& updates,
              const GatherLowering& gathers) {
  sched::Plan& plan = pb.plan;
  const Op& op = ops.ops[i];
  const std::vector<TaskId>& ready = updates.ready;
  if (!lay.delayed && op.first_use_of >= 0 && ready[size_t(op.first_use_of)] >= 0 &&
      !lay.gathered(op.first_use_of)) {
    plan.depend(t, ready[size_t(op.first_use_of)]);
  }
  // Delayed: a block's new parameters go up after this step's last use of the old ones.
  for (size_t b = 0; lay.delayed && b < lay.nb(); ++b) {
    if (ops.last_read[b] == i && ready[b] >= 0) plan.depend(ready[b], t);
  }
  for (const auto& [b, ph] : op.uses) {
    if (!lay.gathered(b)) {  // a device shard used in place (one rank)
      plan.reads(t, hb.dshard[size_t(b)]);
      if (ready[size_t(b)] >= 0) plan.depend(t, ready[size_t(b)]);
      continue;
    }
    const size_t k = find_gather(gathers.schedule(), b, ph);
    plan.depend(t, gathers.upload(k));
    plan.reads(t, ob.gathered_dev[ph][size_t(b)]);
    if (gathers.schedule()[k].last == i) plan.release(t, ob.gathered_dev[ph][size_t(b)]);
  }
  const int64_t gb = op.grad_done;
  if (lay.stage >= 2) {
    if (op.zero_grad >= 0) plan.writes(t, ob.dgrad[lay.at(op.slot, op.zero_grad)]);
    if (gb >= 0 && gb != op.zero_grad) plan.writes(t, ob.dgrad[lay.at(op.slot, gb)]);
    if (op.adds_grad >= 0) plan.writes(t, ob.dgrad[lay.at(op.slot, op.adds_grad)]);
    // The shared block's gradient is also written between head and embedding backward.
    if (gb == lay.layers) plan.reads(t, ob.dgrad[lay.at(op.slot, lay.layers)]);
  }
}

}  // namespace

void lower_ops(PlanBuilder& pb, const Layout& lay, const OpList& ops, const OpBuffers& ob,
               const HostBuffers& hb, const UpdateTasks& updates, OpDrivers drivers, Runtime* rt) {
  auto ptr = std::make_shared<OpPointers>();
  for (int ph = 0; ph < 2; ++ph) {
    for (size_t b = 0; b < lay.nb(); ++b) {
      const int64_t bb = int64_t(b);
      ptr->reads[ph].push_back(lay.gathered(bb)  ? ob.gathered_dev[ph][b]
                               : lay.sharded(bb) ? hb.dshard[b]
                                                 : -1);
    }
  }
  ptr->dgrad = ob.dgrad;
  ptr->nb = lay.nb();
  std::vector<TaskId> op_task(ops.ops.size(), -1);
  size_t need = 0;  // gathers [0, need) are used by the ops so far
  for (size_t i = 0; i < ops.ops.size(); ++i) {
    const Op& op = ops.ops[i];
    for (const auto& [b, ph] : op.uses) {
      if (lay.gathered(b))
        need = std::max(need, find_gather(drivers.gathers.schedule(), b, ph) + 1);
    }
    drivers.gathers.emit_upto(need, op_task);
    const TaskId t = add_op_task(pb, lay, ops, i, ob, drivers.checkpoints, rt, ptr);
    op_task[i] = t;
    drivers.checkpoints.after(i, t, op_task);
    drivers.gathers.after_op(i, t);
    order_op(pb, lay, ops, i, t, ob, hb, updates, drivers.gathers);
    // The gradient of block grad_done is complete: down, reduce, check.
    if (op.grad_done >= 0) drivers.grads.chain(op.grad_done, op.slot, t);
  }
}

}  // namespace strata::engine::zero
