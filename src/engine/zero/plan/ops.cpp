// Stage 1 of the ZeRO plan compiler: the op list (ops.h says the order and why).
#include "engine/zero/plan/ops.h"

#include "core/check.h"

namespace strata::engine::zero {

namespace {

// Appends ops to a list, naming each for its micro-batch when there are several.
class OpWriter {
 public:
  OpWriter(const OpInput& in, OpList& out) : in_(in), out_(out) {}

  Op& add(OpKind kind, int64_t block, int micro, const std::string& name) {
    Op op;
    op.kind = kind;
    op.block = block;
    op.micro = micro;
    op.name = name;
    if (micro >= 0 && in_.micros > 1) op.name += " (micro-batch " + std::to_string(micro) + ")";
    out_.ops.push_back(std::move(op));
    return out_.ops.back();
  }
  // The gathered copy of block b in phase ph, when b is sharded.
  std::vector<std::pair<int64_t, int>> use(int64_t b, int ph) const {
    if (!in_.sharded[size_t(b)]) return {};
    return {{b, ph}};
  }

 private:
  const OpInput& in_;
  OpList& out_;
};

}  // namespace

OpList make_ops(const OpInput& in) {
  STRATA_CHECK(in.micros >= 1 && !in.segments.empty(), "make_ops: no micro-batch or segment");
  OpList out;
  OpWriter w(in, out);
  const int64_t L = in.layers;
  const int K = in.micros;
  const int stage = in.stage;
  const bool summed = in.device_sum;
  out.micros = K;
  out.slots = summed ? 1 : K;
  // The gradient slot of micro-batch k, whether its first writer of a block zeroes the block's
  // gradient (stages 2-3), and whether its last writer completes it.
  auto gslot = [summed](int k) { return summed ? 0 : k; };
  auto zeroes = [stage, summed](int k) { return stage >= 2 && (!summed || k == 0); };
  auto completes = [K, summed](int k) { return !summed || k + 1 == K; };
  w.add(OpKind::kZeroGrads, -1, -1, "zero grads");
  for (int k = 0; k < K; ++k) {
    w.add(OpKind::kSetBatch, -1, k, "set batch");
    Op& e = w.add(OpKind::kEmbeddingForward, L, k, "embedding forward");
    e.uses = w.use(L, 0);
    e.first_use_of = L;
  }
  for (const auto& [begin, end] : in.segments) {
    for (int k = K - 1; k >= 0; --k) {
      for (int64_t l = begin; l < end; ++l) {
        Op& f = w.add(OpKind::kLayerForward, l, k, "forward " + std::to_string(l));
        f.uses = w.use(l, 0);
        f.first_use_of = l;
        f.flops = in.forward_flops[size_t(l)];
      }
    }
  }
  for (int k = 0; k < K; ++k) {
    Op& hf = w.add(OpKind::kHeadForward, L, k, "head forward");
    hf.uses = w.use(L, 0);
    hf.work = sched::Work::kFlopsHead;
    hf.flops = in.forward_flops[size_t(L)];
    Op& hb = w.add(OpKind::kHeadBackward, L, k, "head backward");
    hb.uses = w.use(L, 0);
    hb.slot = gslot(k);
    if (zeroes(k)) hb.zero_grad = L;
    if (stage >= 2 && !zeroes(k)) hb.adds_grad = L;
    hb.work = sched::Work::kFlopsHead;
    hb.flops = in.backward_flops[size_t(L)];
  }
  out.last_read.assign(size_t(L) + 1, 0);
  out.last_read[size_t(L)] = out.ops.size() - 1;
  const size_t last_seg = in.segments.size() - 1;
  for (size_t seg = last_seg + 1; seg-- > 0;) {
    const auto [begin, end] = in.segments[seg];
    for (int k = 0; k < K; ++k) {
      if (seg != last_seg || k != 0) {
        for (int64_t l = begin; l < end; ++l) {
          Op& r = w.add(OpKind::kLayerRecompute, l, k, "recompute " + std::to_string(l));
          r.uses = w.use(l, 1);
          r.flops = in.forward_flops[size_t(l)];
        }
      }
      for (int64_t l = end - 1; l >= begin; --l) {
        Op& b = w.add(OpKind::kLayerBackward, l, k, "backward " + std::to_string(l));
        b.uses = w.use(l, 1);
        b.slot = gslot(k);
        if (zeroes(k)) b.zero_grad = l;
        if (completes(k)) b.grad_done = l;
        if (stage >= 2 && !zeroes(k) && !completes(k)) b.adds_grad = l;
        b.flops = in.backward_flops[size_t(l)];
        out.last_read[size_t(l)] = out.ops.size() - 1;
      }
    }
  }
  // The embedding gradient is a scatter-add of the output gradient: it reads no parameter, so
  // the shared block needs no backward gather.
  for (int k = 0; k < K; ++k) {
    Op& e = w.add(OpKind::kEmbeddingBackward, L, k, "embedding backward");
    e.slot = gslot(k);
    if (!summed) e.grad_done = L;
    if (stage >= 2 && summed) e.adds_grad = L;
  }
  if (summed) w.add(OpKind::kFoldHeadGradient, L, -1, "fold head gradient").grad_done = L;
  return out;
}

size_t find_op(const std::vector<Op>& ops, OpKind kind, int64_t block, int micro) {
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == kind && ops[i].block == block && ops[i].micro == micro) return i;
  }
  STRATA_CHECK(false, "ZeRO plan: no op of kind " + std::to_string(int(kind)) + " on block " +
                          std::to_string(block) + " for micro-batch " + std::to_string(micro));
  return ops.size();
}

}  // namespace strata::engine::zero
