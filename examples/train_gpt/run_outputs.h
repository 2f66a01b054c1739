// What a run writes of its model: --save-model (llm.c's file) and --export-safetensors at the
// end, and the checkpoints of --checkpoint-every (engine/checkpoint.h: the optimizer's file
// written in the background during the next step, the parameters as an llm.c file, fp32 for
// fp16 models, whose values bf16 would round). Every rank takes part (a sharded model's blocks
// are gathered in the writer's block order); rank 0 writes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/status.h"
#include "engine/checkpoint.h"
#include "model/model_file.h"
#include "progress.h"
#include "run.h"

namespace strata::train_gpt {

// The current parameters, block by block, to `write` on rank 0 (the other ranks gather with it),
// the shared block first or last.
using BlockWriter = std::function<Status(const model::BlockSource&)>;
Status write_blocks(const Run& run, bool shared_first, const BlockWriter& write);

// --save-model and --export-safetensors, after applying a pending update; from here a signal
// exits at once (removing the partial files). Errors name the flag.
Status save_outputs(const Run& run);

// The checkpoints of --checkpoint-every.
class Checkpoints {
 public:
  Checkpoints(const Run& run, Progress& progress) : run_(run), progress_(progress) {}
  // Starts the save of the state after `step` (a pending update applied first); the caller
  // trains the next step, then finish()es it.
  Status start(int64_t step);
  // Completes the save in progress, if any, and says so with its exposed cost (rank 0).
  Status finish();
  int64_t saved_step() const { return saved_step_; }  // the last save this run completed

 private:
  const Run& run_;
  Progress& progress_;
  std::unique_ptr<engine::CheckpointSave> pending_;
  int64_t saved_step_ = 0;
  double start_s_ = 0.0;  // the pending save's time in the training thread so far
};

}  // namespace strata::train_gpt
