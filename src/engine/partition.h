// ZeRO partitioning of the model's blocks over N data-parallel ranks (DESIGN.md §1).
//
// Every block (a layer, or the shared block) is one flat vector of `numel` elements. It is cut
// into N shards of shard_numel = ceil(numel / N) elements, the communicators' padding rule
// (comm/communicator.h): rank r owns elements [r*c, min((r+1)*c, numel)) of the real data, and
// the block is padded with zeros to N*c so that every collective moves equal shards.
//
// What each stage keeps per rank (fp16/bf16 working copies, fp32 master + Adam m + v):
//   stage 0: parameters, gradients and optimizer state whole;
//   stage 1: optimizer state sharded;
//   stage 2: gradients sharded too;
//   stage 3: parameters sharded too, except blocks below the persistence threshold
//            (DeepSpeed's stage3_param_persistence_threshold, in elements), whose parameters
//            stay whole on every rank (their gradients and optimizer state are still sharded).
// So, with Ψ elements and nothing persistent: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N and 16Ψ/N bytes,
// plus the padding (at most N-1 elements per block).
// Value type; thread-safe to read.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace strata::engine {

struct BlockPartition {
  int64_t numel = 0;        // real elements of the block
  int64_t shard_numel = 0;  // ceil(numel / N): one rank's shard, padding included
  bool persistent = false;  // stage 3: parameters kept whole on every rank
  // The real elements rank r owns: [begin, end) (empty for a rank that holds only padding).
  int64_t owned_begin(int rank) const;
  int64_t owned_end(int rank) const;
};

// Bytes of model state one rank holds at a stage.
struct ModelStateBytes {
  int64_t params16 = 0;   // 16-bit working parameters
  int64_t grads16 = 0;    // 16-bit gradients
  int64_t optimizer = 0;  // fp32 master, m and v (12 bytes per element)
  int64_t total() const { return params16 + grads16 + optimizer; }
};

class Partitioning {
 public:
  // ranks >= 1; every block numel > 0; persistence_threshold >= 0 (0: nothing persistent).
  static Result<Partitioning> create(std::span<const int64_t> block_numel, int ranks,
                                     int64_t persistence_threshold);

  int ranks() const { return ranks_; }
  size_t num_blocks() const { return blocks_.size(); }
  const BlockPartition& block(size_t b) const { return blocks_[b]; }
  int64_t numel() const;         // Ψ: real elements of every block
  int64_t padded_numel() const;  // N * the shards of every block

  // Model-state bytes one rank holds at `stage` (0..3) with 16-bit working copies.
  Result<ModelStateBytes> model_state_bytes(int stage) const;

 private:
  int ranks_ = 1;
  std::vector<BlockPartition> blocks_;
};

}  // namespace strata::engine
