// Weight decay on part of an optimizer partition (model::DecayRule): the element ranges of a
// partition that take the decay, and the walk over a partition's segments with and without it.
// The optimizers (offloaded_optimizer.h, device_optimizer.h) run each segment with the step's
// constants or cpu::without_decay of them; per-element arithmetic is unchanged, so a segment's
// bits do not depend on where a partition is cut.
//
// Thread safety: values and a pure function.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace strata::engine {

// The ranges of a partition that take weight decay, relative to the partition (sorted,
// disjoint); none (std::nullopt): all of it.
using DecayRanges = std::optional<std::vector<model::ElementRange>>;

// The decayed ranges of elements [begin, begin + numel) of a block whose decayed ranges are
// `block_ranges`, relative to `begin` (a shard or the whole block; padding past the block takes
// none).
inline std::vector<model::ElementRange> clip_ranges(
    const std::vector<model::ElementRange>& block_ranges, int64_t begin, int64_t numel) {
  std::vector<model::ElementRange> out;
  for (const model::ElementRange& r : block_ranges) {
    const int64_t b = std::max(r.begin, begin), e = std::min(r.end, begin + numel);
    if (b < e) out.push_back({b - begin, e - begin});
  }
  return out;
}

// fn(begin, end, decay) over [0, numel) in order: the decayed ranges with true, the rest false.
template <typename Fn>
Status for_each_decay_segment(const DecayRanges& ranges, int64_t numel, Fn&& fn) {
  if (!ranges) return fn(int64_t{0}, numel, true);
  int64_t at = 0;
  for (const model::ElementRange& r : *ranges) {
    if (r.begin > at) STRATA_RETURN_IF_ERROR(fn(at, r.begin, false));
    if (r.end > r.begin) STRATA_RETURN_IF_ERROR(fn(r.begin, r.end, true));
    at = r.end;
  }
  if (at < numel) STRATA_RETURN_IF_ERROR(fn(at, numel, false));
  return ok_status();
}

}  // namespace strata::engine
