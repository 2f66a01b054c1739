// train_gpt's data (--data, --val-data, --data-order, --val-batches): the synthetic addition
// task (model/synthetic_task.h) or llm.c token files (model/dataloader.h). Every rank builds the
// same global batch of N*B rows for a step and trains on its own B rows, so the run is the same
// for any split of a global batch; validation batches are the same on every rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "flags.h"
#include "model/dataloader.h"
#include "model/synthetic_task.h"

namespace strata::train_gpt {

// What --data names, before the model's shape is known.
struct DataSource {
  std::optional<model::AdditionTask> task;  // synthetic:addition[:DIGITS]
  std::vector<std::string> files;           // token data: the shards, sorted
  std::vector<std::string> val_files;       // --val-data
  std::string describe() const;
};
// kConfig naming --data or --val-data and the value for a bad task or a pattern without files.
Result<DataSource> parse_data(const Flags& f);

class TrainData {
 public:
  // rows: the global batch (ranks x B); seq: T; vocab: the model's (tokens are checked against
  // it). Token files are opened (their headers checked) here.
  static Result<TrainData> open(const DataSource& src, const Flags& f, int64_t rows, int64_t seq,
                                int64_t vocab);
  const model::AdditionTask* task() const { return src_.task ? &*src_.task : nullptr; }
  // The global batch number `index` (1-based, taken in order; with gradient accumulation a step
  // takes several): rows x seq tokens and targets (-1: not scored).
  Status train_batch(int64_t index, int32_t* tokens, int32_t* targets);
  // Step `step`'s `micro` global batches (one per micro-batch), of each the rows of `rank`
  // ([rank*B, (rank+1)*B)), into tokens/targets [micro*B*seq] (micro-batch k at k*B*seq).
  Status rank_batches(int64_t step, int64_t micro, int rank, int32_t* tokens, int32_t* targets);
  // Validation: val_batches() global batches (ranks x B rows), sharded over the ranks as the
  // training batches are (llm.c's validation): batch i's rows of `rank` into tokens/targets
  // [B*seq]. None without a source.
  int64_t val_batches() const { return val_batches_; }
  Status val_batch(int64_t i, int rank, int32_t* tokens, int32_t* targets);
  // The training loader's position (token data).
  std::optional<model::LoaderPosition> position() const;
  // Resuming: the training loader at `pos` (token data; the synthetic task needs nothing).
  Status seek(const model::LoaderPosition& pos);

 private:
  DataSource src_;
  uint64_t seed_ = 0;
  int64_t rows_ = 0, batch_ = 0, seq_ = 0, val_batches_ = 0;
  std::vector<int32_t> global_tokens_, global_targets_;  // rank_batches' whole global batch
  std::optional<model::DataLoader> train_, val_;
};

}  // namespace strata::train_gpt
