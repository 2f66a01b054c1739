#include "engine/partition.h"

#include <algorithm>

#include "comm/communicator.h"
#include "engine/engine_config.h"

namespace strata::engine {

int64_t BlockPartition::owned_begin(int rank) const {
  return std::min(numel, static_cast<int64_t>(rank) * shard_numel);
}

int64_t BlockPartition::owned_end(int rank) const {
  return std::min(numel, static_cast<int64_t>(rank + 1) * shard_numel);
}

Result<Partitioning> Partitioning::create(std::span<const int64_t> block_numel, int ranks,
                                          int64_t persistence_threshold) {
  if (ranks < 1) {
    return make_error(ErrorCode::kConfig, "data-parallel ranks ", ranks, " is not accepted (>= 1)");
  }
  if (persistence_threshold < 0) {
    return make_error(ErrorCode::kConfig, "zero_optimization.stage3_param_persistence_threshold ",
                      persistence_threshold, " is not accepted (>= 0 elements)");
  }
  Partitioning p;
  p.ranks_ = ranks;
  for (size_t b = 0; b < block_numel.size(); ++b) {
    const int64_t n = block_numel[b];
    if (n <= 0) {
      return make_error(ErrorCode::kConfig, "block ", b, " of ", n,
                        " elements is not accepted (> 0)");
    }
    BlockPartition bp;
    bp.numel = n;
    bp.shard_numel = static_cast<int64_t>(comm::shard_numel(static_cast<size_t>(n), ranks));
    bp.persistent = n < persistence_threshold;
    p.blocks_.push_back(bp);
  }
  return p;
}

int64_t Partitioning::numel() const {
  int64_t n = 0;
  for (const auto& b : blocks_) n += b.numel;
  return n;
}

int64_t Partitioning::padded_numel() const {
  int64_t n = 0;
  for (const auto& b : blocks_) n += b.shard_numel * ranks_;
  return n;
}

Result<ModelStateBytes> Partitioning::model_state_bytes(int stage) const {
  if (stage < 0 || stage > 3) {
    return make_error(ErrorCode::kConfig, ref(Field::kZeroStage), " ", stage,
                      " is not accepted (0..3)");
  }
  ModelStateBytes m;
  for (const auto& b : blocks_) {
    const int64_t whole = b.numel, shard = b.shard_numel;
    m.params16 += 2 * (stage == 3 && !b.persistent ? shard : whole);
    m.grads16 += 2 * (stage >= 2 ? shard : whole);
    m.optimizer += 12 * (stage >= 1 ? shard : whole);
  }
  return m;
}

}  // namespace strata::engine
