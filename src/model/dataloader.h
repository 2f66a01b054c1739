// DataLoader: batches of B sequences of T tokens with shifted targets, from llm.c token files
// (GPT-2's uint16 or llama-3's uint32, chosen by each file's header: token_file.h)
// (one, or a list of shards: a glob) or an in-memory token stream. Two orders:
//   sequential: llm.c's. Each shard in turn, a batch is the B*T+1 tokens from position k*B*T
//               (k = 0, 1, ... while they fit): row b is tokens [k*B*T + b*T, ... + T] and its
//               targets the same shifted by one. After the last shard, the first again (the next
//               epoch). With N ranks of B rows each, llm.c's rank r reads rows [r*B, (r+1)*B)
//               of the batch of N*B rows: create the loader with B = N*B.
//   shuffled:   every shard cut into windows of T+1 tokens (window w covers tokens [w*T, w*T+T]
//               of its shard); each epoch visits all windows in a permutation drawn from (seed,
//               epoch) with a counter-based RNG, B consecutive windows per batch, a partial last
//               batch dropped.
// The position (epoch, batch) can be read and restored, so a resumed run sees the same batches.
// Token files are read row by row (pread; shards are not read whole, nor mapped, so that a file
// truncated under a running job is an error naming it, not a SIGBUS); their headers and sizes are
// checked when opened, and every token against the vocabulary as it is read.
// Ownership: owns its open files / its copy of the tokens. Thread safety: none (one thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::model {

enum class DataOrder { kSequential, kShuffled };

struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;  // index of the next batch within the epoch
};

class DataLoader {
 public:
  // Token files (llm.c's format, token_file.h) in this order. kIo / kCorrupt naming the file
  // when one cannot be mapped or its header or size is wrong; kConfig when B or T is not
  // positive, a shard holds fewer than B*T+1 tokens (sequential) or the windows of all shards
  // make no whole batch (shuffled). Tokens >= vocab are refused by next().
  static Result<DataLoader> open(const std::vector<std::string>& files, int64_t batch, int64_t seq,
                                 DataOrder order, uint64_t seed, int64_t vocab);
  // An in-memory stream (one shard, no vocabulary check).
  static Result<DataLoader> create(std::vector<uint16_t> tokens, int64_t batch, int64_t seq,
                                   uint64_t seed, DataOrder order = DataOrder::kShuffled);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t tokens() const;  // in all shards
  int64_t shards() const { return static_cast<int64_t>(shards_.size()); }
  LoaderPosition position() const { return pos_; }
  // kConfig when pos.batch is not in [0, batches_per_epoch) or pos.epoch < 0.
  Status seek(LoaderPosition pos);
  // Fills inputs and targets (int32 [B*T] each; targets[b,t] = inputs[b,t+1] of the window) and
  // advances the position. kCorrupt naming the file and the token's index for a token >= vocab
  // (the position does not advance).
  Status next(int32_t* inputs, int32_t* targets);

 private:
  struct Shard {
    std::string path;
    const uint16_t* tokens = nullptr;  // in memory; null for a file, read row by row
    int fd = -1;                       // the file's
    int64_t count = 0;
    std::shared_ptr<const void> keep;  // the open file or the vector
    int token_bytes = 2;               // a file's: 2 (GPT-2's uint16) or 4 (llama-3's uint32)
  };
  DataLoader() = default;
  Status init(int64_t batch, int64_t seq, DataOrder order, uint64_t seed, int64_t vocab);
  void shuffle_epoch();
  // Shard and first token of the row-th window of batch `batch` of the current epoch.
  std::pair<size_t, int64_t> locate(int64_t batch, int64_t row);

  std::vector<Shard> shards_;
  int64_t batch_ = 0, seq_ = 0, vocab_ = 0;  // vocab 0: not checked
  DataOrder order_kind_ = DataOrder::kShuffled;
  uint64_t seed_ = 0;
  std::vector<int64_t> first_;  // by shard: its first window (shuffled) or batch (sequential)
  int64_t batches_per_epoch_ = 0;
  std::vector<int64_t> order_;  // shuffled: permutation of the windows for order_epoch_
  int64_t order_epoch_ = -1;
  LoaderPosition pos_;
  std::vector<std::byte> raw_;  // a row read from a file
  std::vector<uint32_t> row_;   // a row's tokens
};

// The files of a --data value: a path, or a glob pattern (sorted matches). kConfig naming the
// pattern when nothing matches.
Result<std::vector<std::string>> expand_data_files(const std::string& pattern);

}  // namespace strata::model
