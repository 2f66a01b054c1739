// Crash-safe training checkpoints (train_gpt --checkpoint-dir, --resume). A checkpoint is a
// directory ROOT/step_NNNNNNNN holding:
//   optimizer-rankR.bin  rank R's optimizer state: every partition's fp32 master, m and v, read
//                        through the OffloadedOptimizer (its NVMe partitions through the swap
//                        store, not by copying the swap files)
//   state-rankR.json     Adam's step count and the loss scaler's counters (StepScaling::State)
//   what the caller writes on rank 0 (train_gpt: the 16-bit parameters, an llm.c model file)
//   manifest.json        step, ranks, stage, model, the caller's JSON (data position, settings),
//                        and every file's size and xxh3 checksum
//   DONE                 written last; holds the manifest's xxh3
// Saving is collective: every rank writes and fsyncs its files under step_N.tmp; rank 0 writes
// the manifest, renames the directory to step_N, fsyncs ROOT and writes DONE. Only then are
// complete checkpoints beyond `keep` removed (oldest first), so a crash at any point leaves the
// previous checkpoint loadable; a directory without DONE is never loaded, and leftovers of an
// interrupted save are removed by the next one. Loading verifies the manifest (ranks, stage and
// model as the caller expects, naming both), every file's size and checksum, and each
// partition's size; any mismatch is an error naming the file.
// Thread safety: none; the calling thread of the training loop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "comm/communicator.h"
#include "core/status.h"
#include "engine/offload_step.h"
#include "engine/offloaded_optimizer.h"

namespace strata::engine {

struct CheckpointInfo {
  int64_t step = 0;  // steps done
  int ranks = 1;
  int stage = 0;
  std::string model;       // the model's shape, as GptConfig::describe()
  std::string extra_json;  // the caller's (a JSON object)
};

// Collective. `write_shared(dir)` runs on every rank (it may take part in collectives); what it
// writes into dir on rank 0 is checksummed with the rest. kIo naming the file on a failed write
// (then the previous checkpoint is untouched and the temporary directory removed).
Status save_checkpoint(const std::string& root, int keep, comm::Communicator& comm,
                       const CheckpointInfo& info, OffloadedOptimizer& opt,
                       const StepScaling::State& scaling,
                       const std::function<Status(const std::string& dir)>& write_shared);

// The checkpoint to resume from: `path` itself when it holds a DONE marker, else the newest
// step_N under it that does. kConfig naming path when there is none.
Result<std::string> find_checkpoint(const std::string& path);

// Reads and checks dir/manifest.json against `expect` (ranks, stage, model; step and extra are
// filled in from the manifest) and the checksums of this rank's files and the shared ones (but
// the optimizer file, which load_checkpoint checks as it reads it).
Result<CheckpointInfo> verify_checkpoint(const std::string& dir, int rank,
                                         const CheckpointInfo& expect);

// Loads this rank's optimizer state (every partition, sizes checked, the file's checksum checked
// as it is read: on a mismatch the optimizer holds damaged values and the error names the file)
// and returns its scaling state. Call after verify_checkpoint.
Result<StepScaling::State> load_checkpoint(const std::string& dir, int rank,
                                           OffloadedOptimizer& opt);

}  // namespace strata::engine
