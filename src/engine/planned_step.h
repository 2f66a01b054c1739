// PlannedStep: the single-rank offloaded step (offload_step.h) as a scheduler plan, built once
// and replayed every step (DESIGN.md §4). Per block, in backward order:
//   compute  the forward and backward entry points of the model, one task per layer;
//   d2h      the block's gradient to pinned host memory in the model's dtype (2 bytes per
//            parameter for bf16) as soon as its backward is done;
//   cpu      grad_check of the block (sum of squares, non-finite test); then the CPU Adam of its
//            optimizer partition, writing the new parameters in the model's dtype;
//   h2d      the new parameters back into the model's block as soon as they are ready;
//   nvme     for NVMe partitions: the state is read into a pinned staging buffer from the start
//            of the step (read-ahead bounded by the staging budget: `staging_slots` buffers of
//            the largest NVMe partition), and written back behind the Adam.
// Global-norm clipping stays exact: with --grad-clip > 0 the update of step n waits for the norm
// task, which sums the blocks' partial sums in block order (the serial step's order, so the norm
// and the clip coefficient have the same bits), that is for the whole backward; so does an fp16
// update for the overflow check (an overflow skips it and lowers the loss scale: StepScaling,
// the serial step's arithmetic). The plan is then rotated: run(n) ends with step n's backward,
// checks and norm, and its update (Adam in forward order, NVMe state read ahead, parameters up)
// runs at the start of run(n+1), where forward of layer l waits only for block l's new parameters.
// No step ever sees stale parameters; the device holds step n's update only after the next run() or
// flush(). With clipping off (and no fp16), each block's Adam starts as soon as its gradient is on
// the host (and its own non-finite check passed), while backward of the earlier layers still
// computes. A non-finite gradient then stops the step after the blocks checked before it were
// updated (the serial step updates none); the run ends with that error either way. Any task error
// leaves the executor failed: every later run() returns it. Results are bit-identical to SerialStep
// (tests/engine/test_planned_step.cpp). The optimizer's own staging is not used (create it with
// staging_slots = 1 to save that pinned memory); the plan's pinned arena is registered with the
// swap store as io_uring fixed buffers.
//
// Ownership: borrows the model and the optimizer, which must outlive it; owns the executor
// (streams, workers, pinned staging). Thread safety: none; run() from one thread.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "engine/device_optimizer.h"
#include "engine/offload_step.h"
#include "engine/offloaded_optimizer.h"
#include "scheduler/executor.h"

namespace strata::engine {

struct PlannedStepOptions {
  OffloadStepOptions step;
  sched::ExecutorOptions executor;
  int staging_slots = 3;  // pinned staging buffers for NVMe partitions (>= 1)
  // --offload-optimizer none: the fp32 master, m and v move to the device at create (from the
  // optimizer's state) and Kernels::adam_step updates them there, on the compute lane, writing
  // the new parameters in place; no parameter goes up. Gradients still come down in 16 bits for
  // the checks and the norm (the serial step's arithmetic, so the bits stay the same), and the
  // plan is always rotated, so that no update runs before every gradient is checked. Refused
  // with an NVMe share of the state.
  bool device_optimizer = false;
};

class PlannedStep {
 public:
  static Result<std::unique_ptr<PlannedStep>> create(model::GptModel& model,
                                                     OffloadedOptimizer& optimizer,
                                                     const PlannedStepOptions& options);
  // One training step on a micro-batch (tokens/targets: host int32 [B*T]); `step` from 1.
  // With clipping, the update of this step is applied by the next run() or flush().
  Result<StepResult> run(const int32_t* tokens, const int32_t* targets, int64_t step);
  // Applies a pending update (clipping, fp16 or the device optimizer), so that the model's
  // parameters and the optimizer state (copied back to the host from the device optimizer) are
  // those after the last run(): call it before evaluating, saving or reading them.
  Status flush();

  const sched::Executor& executor() const { return *executor_; }

 private:
  PlannedStep(model::GptModel& model, OffloadedOptimizer& optimizer,
              const PlannedStepOptions& options)
      : model_(model), opt_(optimizer), options_(options) {}
  Result<sched::Plan> build_plan();

  model::GptModel& model_;
  OffloadedOptimizer& opt_;
  PlannedStepOptions options_;
  std::vector<int64_t> blocks_;                // partition -> block
  std::optional<DeviceOptimizer> device_opt_;  // --offload-optimizer none
  std::unique_ptr<sched::Executor> executor_;
  // Written by run()/flush() before a replay, read by its tasks.
  std::vector<int32_t> tokens_, targets_;
  int64_t step_ = 0;
  // The update this replay applies: Adam's step count (0: none) and gradient multiplier.
  int64_t update_step_ = 0;
  float update_grad_scale_ = 1.0f;
  // Rotated: the update decided after the last run(), not applied yet (step count 0: none).
  int64_t pending_adam_step_ = 0;
  float pending_grad_scale_ = 1.0f;
  bool rotate_ = false;  // clipping or fp16: updates run at the start of the next replay
  StepScaling scaling_;
  bool flushing_ = false;  // a flush(): only the pending update runs
  // Written by tasks, ordered by their dependencies.
  std::vector<cpu::GradStats> stats_;  // by block
  double sum_ = 0.0;                   // the gradients' sum of squares (scaled, fp16)
  bool finite_ = true;
};

}  // namespace strata::engine
