// Stage 3 of the ZeRO plan compiler: the moves of the offloaded activation checkpoints
// (--offload-activations; segments [0, S-1), the last segment's activations stay resident).
// Takes the op list (ops.h), the segments' first layers and the number of offloaded segments;
// returns one checkpoint per (micro-batch, segment), index k * S' + s (S' offloaded segments, k
// the micro-batch: one in the micro-batch-major order), with the ops that touch it:
//   writer     writes segment s's kept input into its forward buffer (the layer before the
//              segment; the embedding for s = 0);
//   reader     the forward of the segment's first layer reads it; then it goes down (and on to
//              NVMe);
//   trigger    one segment ahead of its use it comes back up into its backward buffer: after the
//              first op of segment s+1's backward (its recompute, or the head backward when s+1
//              is the last segment);
//   recompute, backward   the recompute and the backward of the segment's first layer read it;
//              the backward releases it.
// The lowering (lower_checkpoints.h) gives each its buffers and tasks.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/zero/plan/ops.h"

namespace strata::engine::zero {

struct CheckpointMove {
  int64_t seg = 0;
  int micro = 0;
  std::string name;  // "checkpoint 2", "checkpoint 2 (micro-batch 1)"
  size_t writer = 0, reader = 0, trigger = 0, recompute = 0, backward = 0;  // ops
};

// segment_begin: the first layer of every segment (all S of them); offloaded: S' (0 or S - 1);
// shared: the shared block's index (the embedding's and the head's ops).
std::vector<CheckpointMove> plan_checkpoint_moves(const std::vector<Op>& ops,
                                                  const std::vector<int64_t>& segment_begin,
                                                  int64_t offloaded, int micros, int64_t shared);

}  // namespace strata::engine::zero
