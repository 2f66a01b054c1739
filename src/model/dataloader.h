// DataLoader: batches of B sequences of T tokens with shifted targets from a token stream.
// The stream is cut into windows of T+1 tokens (window w covers tokens [w*T, w*T + T]), so
// there are (count - 1) / T windows. Each epoch visits the windows in a permutation drawn from
// (seed, epoch) with a counter-based RNG; a batch is B consecutive windows of it, and a partial
// last batch of an epoch is dropped. The position (epoch, batch) can be read and restored, so a
// resumed run sees the same batches as an uninterrupted one.
// Ownership: holds its own copy of the tokens. Thread safety: none (one thread).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace strata::model {

struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;  // index of the next batch within the epoch
};

class DataLoader {
 public:
  // kConfig when B or T is not positive or the stream has fewer than B windows.
  static Result<DataLoader> create(std::vector<uint16_t> tokens, int64_t batch, int64_t seq,
                                   uint64_t seed);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  LoaderPosition position() const { return pos_; }
  // kConfig when pos.batch is not in [0, batches_per_epoch) or pos.epoch < 0.
  Status seek(LoaderPosition pos);
  // Fills inputs and targets (int32 [B*T] each; targets[b,t] = inputs[b,t+1] of the window) and
  // advances the position.
  void next(int32_t* inputs, int32_t* targets);

 private:
  DataLoader(std::vector<uint16_t> tokens, int64_t batch, int64_t seq, uint64_t seed);
  void shuffle_epoch();

  std::vector<uint16_t> tokens_;
  int64_t batch_ = 0, seq_ = 0;
  uint64_t seed_ = 0;
  int64_t windows_ = 0, batches_per_epoch_ = 0;
  std::vector<int64_t> order_;  // permutation of the windows for order_epoch_
  int64_t order_epoch_ = -1;
  LoaderPosition pos_;
};

}  // namespace strata::model
