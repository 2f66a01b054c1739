// Stage 3 of the ZeRO plan compiler: the offloaded checkpoints' moves (checkpoints.h).
#include "engine/zero/plan/checkpoints.h"

namespace strata::engine::zero {

std::vector<CheckpointMove> plan_checkpoint_moves(const std::vector<Op>& ops,
                                                  const std::vector<int64_t>& segment_begin,
                                                  int64_t offloaded, int micros, int64_t shared) {
  std::vector<CheckpointMove> moves;
  const auto segments = int64_t(segment_begin.size());
  for (int k = 0; k < micros; ++k) {
    for (int64_t s = 0; s < offloaded; ++s) {
      CheckpointMove c;
      c.seg = s;
      c.micro = k;
      c.name = "checkpoint " + std::to_string(s) +
               (micros > 1 ? " (micro-batch " + std::to_string(k) + ")" : "");
      const int64_t first = segment_begin[size_t(s)];
      c.writer = s == 0 ? find_op(ops, OpKind::kEmbeddingForward, shared, k)
                        : find_op(ops, OpKind::kLayerForward, first - 1, k);
      c.reader = find_op(ops, OpKind::kLayerForward, first, k);
      c.trigger = s + 2 == segments
                      ? find_op(ops, OpKind::kHeadBackward, shared, k)
                      : find_op(ops, OpKind::kLayerRecompute, segment_begin[size_t(s + 1)], k);
      c.recompute = find_op(ops, OpKind::kLayerRecompute, first, k);
      c.backward = find_op(ops, OpKind::kLayerBackward, first, k);
      moves.push_back(std::move(c));
    }
  }
  return moves;
}

}  // namespace strata::engine::zero
