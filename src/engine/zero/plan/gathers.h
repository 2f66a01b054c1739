// Stage 2 of the ZeRO plan compiler: the gather schedule (stage 3). Takes the op list (ops.h)
// and which blocks' uses need a gather (a sharded block, but a device shard of one rank, which is
// used in place); returns one gather per (block, phase) that the ops use, in the order of first
// use, with the span of ops [first, last] that read it: its copy is on the device from before
// `first` to after `last`. The lowering emits each gather's tasks (the shard from its home, the
// all-gather, the upload) up to prefetch_depth gathers ahead of the compute.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/zero/plan/ops.h"

namespace strata::engine::zero {

struct Gather {
  int64_t block = -1;
  int phase = 0;               // 0: the forward copy, 1: the backward copy
  size_t first = 0, last = 0;  // the ops that read it first and last
};

std::vector<Gather> schedule_gathers(const std::vector<Op>& ops, const std::vector<bool>& gathered);

// The gather of (block, phase) in `gathers`; gathers.size() if none.
size_t find_gather(const std::vector<Gather>& gathers, int64_t block, int phase);

}  // namespace strata::engine::zero
