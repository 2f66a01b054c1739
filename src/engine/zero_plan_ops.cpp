// ZeroStep::build_plan, the compute side: the list of the step's compute ops with the device
// buffers they use, and the loop that emits them (each op's task after the gathers ahead of it,
// with its dependencies on updates, gathered copies and checkpoints; then its gradient's chain,
// zero_plan_grads.cpp).
#include <algorithm>
#include <functional>
#include <string>

#include "engine/zero_plan_build.h"

namespace strata::engine {

using sched::BufferId;
using sched::Lane;
using sched::TaskContext;
using sched::TaskId;
using sched::Tier;

void ZeroStep::plan_ops(PlanBuild& pb) {
  model::Model& m = model_;
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
  pb.params = [this, &m, gathered_dev = pb.gathered_dev](int64_t b, int ph,
                                                         const TaskContext& c) -> const void* {
    if (gathered(b)) return c.buffer(gathered_dev[ph][size_t(b)]);
    return sharded_params(b) ? c.buffer(dshard_[size_t(b)]) : m.param_block(b);
  };
  pb.grads = [&m, dgrad = pb.dgrad, nb](int64_t b, int slot, const TaskContext& c) -> void* {
    const sched::BufferId g = dgrad[static_cast<size_t>(slot) * nb + size_t(b)];
    return g >= 0 ? c.buffer(g) : m.grad_block(b);
  };
  pb.use = [this](int64_t b, int ph) {
    return sharded_params(b) ? std::vector<std::pair<int64_t, int>>{{b, ph}}
                             : std::vector<std::pair<int64_t, int>>{};
  };
  const auto& params = pb.params;
  const auto& use = pb.use;
  auto grads = [g = pb.grads](int64_t b, const TaskContext& c) { return g(b, 0, c); };
  const int64_t L = pb.layers;
  std::vector<PlanBuild::Op>& ops = pb.ops;
  // Stages 0-1: the model's gradients, zeroed before the first micro-batch only (the others
  // add to them).
  ops.push_back({"zero grads", [this, &m, stage](gpu::Stream& s, const TaskContext& c) -> Status {
                   if (stage >= 2 || c.args<Replay>().micro > 0) return ok_status();
                   for (int64_t b = 0; b < m.num_blocks(); ++b) {
                     STRATA_RETURN_IF_ERROR(
                         s.memset(m.grad_block(b), 0,
                                  static_cast<size_t>(m.block_numel(b)) * dtype_size(m.dtype())));
                   }
                   return ok_status();
                 }});
  if (options_.layer_major_micros > 1) {
    plan_segment_major_ops(pb);
    return;
  }
  ops.push_back({"set batch", [this](gpu::Stream& s, const TaskContext&) {
                   return model_.set_batch(s, tokens_.data(), targets_.data());
                 }});
  ops.push_back({"embedding forward",
                 [&m, params, L](gpu::Stream& s, const TaskContext& c) {
                   return m.embedding_forward(s, params(L, 0, c));
                 },
                 use(L, 0), L});
  for (int64_t l = 0; l < L; ++l) {
    ops.push_back({"forward " + std::to_string(l),
                   [&m, params, l](gpu::Stream& s, const TaskContext& c) {
                     return m.layer_forward(s, l, params(l, 0, c));
                   },
                   use(l, 0), l});
    ops.back().flops = m.block_cost(l).forward_flops;
  }
  ops.push_back({"head forward",
                 [&m, params, L](gpu::Stream& s, const TaskContext& c) {
                   return m.head_forward(s, params(L, 0, c));
                 },
                 use(L, 0)});
  const model::BlockCost head = m.block_cost(L), layer = m.block_cost(0);
  ops.back().work = sched::Work::kFlopsHead;
  ops.back().flops = head.forward_flops;
  ops.push_back({"head backward",
                 [&m, params, grads, L](gpu::Stream& s, const TaskContext& c) {
                   return m.head_backward(s, params(L, 0, c), grads(L, c));
                 },
                 use(L, 0), -1, stage >= 2 ? L : -1});
  ops.back().work = sched::Work::kFlopsHead;
  ops.back().flops = head.backward_flops;
  pb.last_read.assign(nb, 0);
  pb.last_read[size_t(L)] = ops.size() - 1;
  const int64_t last_seg = m.num_segments() - 1;
  for (int64_t seg = last_seg; seg >= 0; --seg) {
    if (seg != last_seg) {
      for (int64_t l = m.segment_begin(seg); l < m.segment_end(seg); ++l) {
        ops.push_back({"recompute " + std::to_string(l),
                       [&m, params, l](gpu::Stream& s, const TaskContext& c) {
                         return m.layer_recompute(s, l, params(l, 1, c));
                       },
                       use(l, 1)});
        ops.back().flops = layer.forward_flops;
      }
    }
    for (int64_t l = m.segment_end(seg) - 1; l >= m.segment_begin(seg); --l) {
      ops.push_back({"backward " + std::to_string(l),
                     [&m, params, grads, l](gpu::Stream& s, const TaskContext& c) {
                       return m.layer_backward(s, l, params(l, 1, c), grads(l, c));
                     },
                     use(l, 1), -1, stage >= 2 ? l : -1, l});
      ops.back().flops = layer.backward_flops;
      pb.last_read[size_t(l)] = ops.size() - 1;
    }
  }
  ops.push_back({"embedding backward",
                 [&m, grads, L](gpu::Stream& s, const TaskContext& c) {
                   return m.embedding_backward(s, grads(L, c));
                 },
                 // The embedding gradient is a scatter-add of the output gradient: it reads no
                 // parameter, so the shared block needs no backward gather.
                 {},
                 -1,
                 -1,
                 stage >= 2 ? L : -1});
  if (stage <= 1) add_fold_op(pb);
}

// Where the micro-batches' gradients add up on the device (stages 0-1, or device_grad_sum): after
// the last micro-batch's embedding backward, a tied head's gradient kept apart over the
// micro-batches joins the embedding's (Model::fold_head_grads; nothing when it is not kept
// apart); the shared block's gradient is complete after it.
void ZeroStep::add_fold_op(PlanBuild& pb) {
  model::Model& m = model_;
  const int64_t L = pb.layers;
  pb.ops.push_back({"fold head gradient",
                    [&m, L, grads = pb.grads](gpu::Stream& s, const TaskContext& c) -> Status {
                      if (!c.args<Replay>().last_micro()) return ok_status();
                      return m.fold_head_grads(s, grads(L, 0, c));
                    },
                    {},
                    -1,
                    -1,
                    L});
}

// The segment-major order of K micro-batches (layer_major_micros): each op acts on its
// micro-batch's model slot. Forward: every micro-batch's embedding, then segment by segment every
// micro-batch (from the last to the first, so the first micro-batch's activations of the last
// segment are resident when the backward starts). Heads in order; the backward segment by segment
// in reverse, within a segment micro-batch by micro-batch in order (recomputing each but the
// first one's last segment); the embeddings' backward last, in order. At stage 3 a layer is
// gathered once per pass: its forward copy serves every micro-batch's forward of it, its
// backward copy every recompute and backward (the gathers span their first to last use).
// Gradients, summed on the device (stages 0-1 in the model's blocks; device_grad_sum at 2-3 in
// the plan's one buffer per block, zeroed by micro-batch 0's first writer and reduced after
// micro-batch K-1's last): micro-batch by micro-batch in order as one replay per micro-batch adds
// them at stages 0-1 (a tied head's gradient is kept apart until the last embedding backward:
// Session turns it on). Otherwise at stages 2-3 each micro-batch's gradient of a block is a slot
// of its own, zeroed by its first writer and reduced after its last, into the rank's shard in
// micro-batch order (the shared block's slot of micro-batch k lives on the device from its head
// backward to its embedding backward).
void ZeroStep::plan_segment_major_ops(PlanBuild& pb) {
  model::Model& m = model_;
  const int micros = options_.layer_major_micros;
  const int stage = pb.stage;
  const int64_t L = pb.layers;
  const size_t rows = tokens_.size() / static_cast<size_t>(micros);
  std::vector<PlanBuild::Op>& ops = pb.ops;
  const model::BlockCost head = m.block_cost(L), layer = m.block_cost(0);
  const auto& params = pb.params;
  const auto& grads = pb.grads;
  const auto& use = pb.use;
  // Whether the micro-batches' gradients add up on the device; the gradient slot of micro-batch
  // k (one per micro-batch when they do not), and whether its op zeroes (stages 2-3) and
  // completes a block's gradient.
  const bool summed = pb.slots == 1;
  auto gslot = [summed](int k) { return summed ? 0 : k; };
  auto zeroes = [stage, summed](int k) { return stage >= 2 && (!summed || k == 0); };
  auto completes = [micros, summed](int k) { return !summed || k + 1 == micros; };
  auto micro = [](int k) { return " (micro-batch " + std::to_string(k) + ")"; };
  for (int k = 0; k < micros; ++k) {
    ops.push_back({"set batch" + micro(k), [this, k, rows](gpu::Stream& s, const TaskContext&) {
                     return model_.set_batch(s, tokens_.data() + size_t(k) * rows,
                                             targets_.data() + size_t(k) * rows);
                   }});
    ops.back().micro = k;
    ops.push_back({"embedding forward" + micro(k),
                   [&m, params, L](gpu::Stream& s, const TaskContext& c) {
                     return m.embedding_forward(s, params(L, 0, c));
                   },
                   use(L, 0), L});
    ops.back().micro = k;
  }
  for (int64_t seg = 0; seg < m.num_segments(); ++seg) {
    for (int k = micros - 1; k >= 0; --k) {
      for (int64_t l = m.segment_begin(seg); l < m.segment_end(seg); ++l) {
        ops.push_back({"forward " + std::to_string(l) + micro(k),
                       [&m, params, l](gpu::Stream& s, const TaskContext& c) {
                         return m.layer_forward(s, l, params(l, 0, c));
                       },
                       use(l, 0), l});
        ops.back().micro = k;
        ops.back().flops = m.block_cost(l).forward_flops;
      }
    }
  }
  for (int k = 0; k < micros; ++k) {
    ops.push_back({"head forward" + micro(k),
                   [&m, params, L](gpu::Stream& s, const TaskContext& c) {
                     return m.head_forward(s, params(L, 0, c));
                   },
                   use(L, 0)});
    ops.back().micro = k;
    ops.back().work = sched::Work::kFlopsHead;
    ops.back().flops = head.forward_flops;
    const int g = gslot(k);
    ops.push_back({"head backward" + micro(k),
                   [&m, params, grads, L, g](gpu::Stream& s, const TaskContext& c) {
                     return m.head_backward(s, params(L, 0, c), grads(L, g, c));
                   },
                   use(L, 0), -1, zeroes(k) ? L : -1});
    ops.back().micro = k;
    ops.back().slot = g;
    if (stage >= 2 && !zeroes(k)) ops.back().adds_grad = L;
    ops.back().work = sched::Work::kFlopsHead;
    ops.back().flops = head.backward_flops;
  }
  pb.last_read.assign(pb.nb, 0);
  pb.last_read[size_t(L)] = ops.size() - 1;
  const int64_t last_seg = m.num_segments() - 1;
  for (int64_t seg = last_seg; seg >= 0; --seg) {
    for (int k = 0; k < micros; ++k) {
      if (seg != last_seg || k != 0) {
        for (int64_t l = m.segment_begin(seg); l < m.segment_end(seg); ++l) {
          ops.push_back({"recompute " + std::to_string(l) + micro(k),
                         [&m, params, l](gpu::Stream& s, const TaskContext& c) {
                           return m.layer_recompute(s, l, params(l, 1, c));
                         },
                         use(l, 1)});
          ops.back().micro = k;
          ops.back().flops = layer.forward_flops;
        }
      }
      const int g = gslot(k);
      for (int64_t l = m.segment_end(seg) - 1; l >= m.segment_begin(seg); --l) {
        ops.push_back({"backward " + std::to_string(l) + micro(k),
                       [&m, params, grads, l, g](gpu::Stream& s, const TaskContext& c) {
                         return m.layer_backward(s, l, params(l, 1, c), grads(l, g, c));
                       },
                       use(l, 1), -1, zeroes(k) ? l : -1, completes(k) ? l : -1});
        ops.back().micro = k;
        ops.back().slot = g;
        if (stage >= 2 && !zeroes(k) && !completes(k)) ops.back().adds_grad = l;
        ops.back().flops = layer.backward_flops;
        pb.last_read[size_t(l)] = ops.size() - 1;
      }
    }
  }
  for (int k = 0; k < micros; ++k) {
    const int g = gslot(k);
    ops.push_back({"embedding backward" + micro(k),
                   [&m, grads, L, g](gpu::Stream& s, const TaskContext& c) {
                     return m.embedding_backward(s, grads(L, g, c));
                   },
                   {},
                   -1,
                   -1,
                   summed ? -1 : L});
    ops.back().micro = k;
    ops.back().slot = g;
    if (stage >= 2 && summed) ops.back().adds_grad = L;
  }
  if (summed) add_fold_op(pb);
}

// Emit the compute ops, the gathers ahead of them, and after each gradient: its transfer to
// pinned memory, its reduction (comm) and its check (cpu).
void ZeroStep::emit_ops(PlanBuild& pb) {
  pb.checks.assign(pb.nb, -1);
  size_t need = 0;  // gathers [0, need) are used by the ops so far
  for (size_t i = 0; i < pb.ops.size(); ++i) {
    const PlanBuild::Op& op = pb.ops[i];
    for (const auto& [b, ph] : op.uses) {
      if (gathered(b)) need = std::max(need, pb.find_gather(b, ph) + 1);
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
  model::Model& m = model_;
  sched::Plan& plan = pb.plan;
  const PlanBuild::Op& op = pb.ops[i];
  if (op.zero_grad >= 0) {
    const BufferId dg = pb.dgrad[pb.at(op.slot, op.zero_grad)];
    const size_t bytes = static_cast<size_t>(pb.numel(op.zero_grad)) * pb.es;
    const TaskId z = plan.add("zero grad " + pb.name(op.zero_grad) + pb.slot_name(op.slot),
                              Lane::kCompute, [this, dg, bytes](const TaskContext& c) -> Status {
                                if (c.args<Replay>().flushing) return ok_status();
                                return c.stream->memset(c.buffer(dg), 0, bytes);
                              });
    plan.acquire(z, dg);
    plan.writes(z, dg);
  }
  auto fn = op.fn;
  std::vector<std::pair<int64_t, BufferId>> cks;  // the offloaded checkpoints it touches
  for (const PlanBuild::CkUse& u : pb.ck_uses[i]) cks.emplace_back(u.seg, u.buf);
  const int micro = op.micro;
  const TaskId t =
      plan.add(op.name, Lane::kCompute, [this, &m, fn, cks, micro](const TaskContext& c) -> Status {
        if (c.args<Replay>().flushing) return ok_status();
        // Segment-major: the op's micro-batch's model slot, before its checkpoints (a slot's
        // kept inputs are its own).
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
  const PlanBuild::Op& op = pb.ops[i];
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
    if (pb.last_read[b] == i && ready[b] >= 0) plan.depend(ready[b], t);
  }
  for (const auto& [b, ph] : op.uses) {
    if (!gathered(b)) {  // a device shard used in place (one rank)
      plan.reads(t, dshard_[size_t(b)]);
      if (ready[size_t(b)] >= 0) plan.depend(t, ready[size_t(b)]);
      continue;
    }
    const PlanBuild::Gather& gt = pb.gathers[pb.find_gather(b, ph)];
    plan.depend(t, gt.upload);
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
