// TrainStep: what a training loop needs of a step, whichever runs it: the serial reference
// (serial_step.h) or the ZeRO step's plan (zero_step.h, which at stage 0 over one rank is the
// single-rank planned step). A front end holds one through engine::Session and never asks which.
//
// Ownership: implementations borrow the model and the optimizer. Thread safety: none; every call
// from one thread. Collective (every rank calls it) where the ZeRO step's call is.
#pragma once

#include <cstdint>
#include <optional>

#include "core/status.h"
#include "engine/offload_step.h"
#include "engine/step_reports.h"

namespace strata::sched {
class Executor;
}

namespace strata::engine {

class TrainStep {
 public:
  virtual ~TrainStep() = default;

  // One step on `micro_batches` micro-batches (host int32 [micro_batches*B*T], micro-batch k at
  // k*B*T); `step` from 1. A step that rotates its update applies it in the next run() or flush().
  virtual Result<StepResult> run(const int32_t* tokens, const int32_t* targets, int64_t step,
                                 int micro_batches) = 0;
  // Applies a pending update: then the model's device blocks and the optimizer hold the state
  // after the last run() (before evaluating, saving, reading parameters).
  virtual Status flush() = 0;
  // The learning rate of the next run()'s update.
  virtual void set_lr(float lr) = 0;
  // Adam's step count and the loss scaler (checkpoints: after flush(); restore before run()).
  virtual StepScaling::State scaling_state() const = 0;
  virtual void restore_scaling(const StepScaling::State& s) = 0;
  // Inference forward with the current parameters (after flush()); then the model's
  // logits_to_host()/mean_loss() read the result.
  virtual Status forward_inference(const int32_t* tokens, const int32_t* targets) = 0;
  // Block b's whole current parameters as fp32 on the host (after flush()).
  virtual Status gather_params(int64_t block, float* host) = 0;
  // The plan's executor (its plan and the last step's trace), or null for a step without one.
  virtual const sched::Executor* executor() const { return nullptr; }
  // Whether the next steps record a trace (only a step with an executor has one).
  virtual void set_trace(bool /*on*/) {}
  // What this rank holds by tier and kind, and the last step's traffic with its theory; nothing
  // for a step without a plan (the serial reference holds the model on the device and the
  // optimizer state in host RAM, and moves every gradient and parameter once a step).
  virtual std::optional<ZeroMemory> memory_report() const { return std::nullopt; }
  virtual std::optional<StepTraffic> traffic_report() const { return std::nullopt; }
};

}  // namespace strata::engine
