// PlannedStep: the single-rank offloaded step (offload_step.h) as a scheduler plan, built once
// and replayed every step (DESIGN.md §4): the ZeRO step (zero_step.h) at stage 0 over a one-rank
// LocalComm, whose collectives move nothing. Per block, in backward order:
//   compute  the forward and backward entry points of the model, one task per layer;
//   d2h      the block's gradient to pinned host memory in the model's dtype (2 bytes per
//            parameter for bf16) as soon as its backward is done;
//   cpu      the block's sum of squares and non-finite test; then the CPU Adam of its optimizer
//            partition, writing the new parameters in the model's dtype;
//   h2d      the new parameters back into the model's block as soon as they are ready;
//   nvme     for NVMe partitions: the state is read into a pinned staging buffer from the start
//            of the step (read-ahead bounded by the staging budget: `staging_slots` buffers of
//            the largest NVMe partition), and written back behind the Adam.
// With --grad-clip > 0, fp16 or the device optimizer the update of step n waits for every
// gradient's check (the norm sums the blocks' partial sums in block order: the serial step's
// order), so the plan is rotated: run(n) ends with step n's backward, checks and norm, and its
// update runs at the start of run(n+1), where the forward of layer l waits only for block l's new
// parameters; the device holds step n's update only after the next run() or flush(). Without
// them, each block's Adam starts as soon as its gradient is on the host and passed its own check,
// while backward of the earlier layers still computes; a non-finite gradient then stops the step
// after the blocks checked before it were updated (the serial step updates none); the run ends
// with that error either way. Any task error leaves the executor failed: every later run()
// returns it. Results are bit-identical to SerialStep (tests/engine/test_planned_step.cpp).
// The optimizer's own staging is not used (create it with staging_slots = 1 to save that pinned
// memory); the plan's pinned arena is registered with the swap store as io_uring fixed buffers.
//
// Ownership: borrows the model and the optimizer, which must outlive it; owns the one-rank
// communicator and the ZeRO step. Thread safety: none; run() from one thread.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "engine/offload_step.h"
#include "engine/offloaded_optimizer.h"
#include "engine/zero_step.h"
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
  // --gpu-optimizer-fraction: that share of the partitions on the device, the rest on the CPU
  // (ZeroStepOptions::gpu_optimizer_fraction).
  double gpu_optimizer_fraction = 0.0;
  // --delayed-update warm-up (ZeroStepOptions::delayed_update_warmup; -1: off).
  int64_t delayed_update_warmup = -1;
};

class PlannedStep {
 public:
  static Result<std::unique_ptr<PlannedStep>> create(model::GptModel& model,
                                                     OffloadedOptimizer& optimizer,
                                                     const PlannedStepOptions& options);
  // One training step on micro_batches micro-batches (tokens/targets: host int32
  // [micro_batches*B*T]; their gradients add up, ZeroStep::run); `step` from 1. Rotated, the
  // update of this step is applied by the next run() or flush().
  Result<StepResult> run(const int32_t* tokens, const int32_t* targets, int64_t step,
                         int micro_batches = 1) {
    return step_->run(tokens, targets, step, micro_batches);
  }
  // Applies a pending update, so that the model's parameters and the optimizer state (copied
  // back to the host from the device optimizer) are those after the last run(): call it before
  // evaluating, saving or reading them.
  Status flush() { return step_->flush(); }
  // The learning rate of the next run()'s update (ZeroStep::set_lr).
  void set_lr(float lr) { step_->set_lr(lr); }
  StepScaling::State scaling_state() const { return step_->scaling_state(); }
  void restore_scaling(const StepScaling::State& s) { step_->restore_scaling(s); }

  const sched::Executor& executor() const { return *step_->executor(); }
  void set_trace(bool on) { step_->set_trace(on); }
  // The ZeRO step it runs (the planner reads its plan and memory).
  const ZeroStep& zero() const { return *step_; }

 private:
  PlannedStep() = default;
  std::unique_ptr<comm::Communicator> comm_;  // one rank
  std::unique_ptr<ZeroStep> step_;
};

}  // namespace strata::engine
