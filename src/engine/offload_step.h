// The single-rank offloaded training step (DESIGN.md §4 without ZeRO partitioning): the model
// resident on the device, the fp32 master weights and Adam moments in an OffloadedOptimizer
// (host RAM and/or NVMe). Two implementations with the same results, bit for bit:
//   SerialStep (serial_step.h):   forward, backward, every gradient down, the global norm, the
//                                 whole optimizer, every parameter up; one thing at a time.
//   the planned step:             the same step as a scheduler plan, replayed every step, with
//                                 transfers and the CPU optimizer overlapping compute: the ZeRO
//                                 step (zero_step.h) at stage 0 over one rank, whose collectives
//                                 move nothing. Per block, in backward order: the layer's
//                                 backward (compute); its 16-bit gradient down as soon as it is
//                                 produced (d2h); its check and the CPU Adam of its partition
//                                 (cpu); the new parameters up as soon as they are ready (h2d);
//                                 NVMe partitions read ahead into pinned staging and written
//                                 behind (nvme). With clipping, fp16 or the device optimizer the
//                                 update is rotated into the next run() (flush() applies it).
// engine::Session builds either from an EngineConfig (Schedule::kSerial or kPlanned).
//
// Optimizer partitions are the model's blocks in backward order (partition_blocks): the last
// layer first, the shared block (embeddings, final layernorm) last, so that the NVMe share of the
// state (the first partitions) belongs to the blocks whose gradients are ready first.
#pragma once

#include <cstdint>
#include <vector>

#include <optional>

#include "core/status.h"
#include "engine/loss_scaler.h"
#include "model/model.h"

namespace strata::engine {

struct OffloadStepOptions {
  float grad_clip = 1.0f;          // clip the global gradient norm to this; 0 = off
  LossScalerOptions loss_scaling;  // fp16 models only (dynamic by default)
};

struct StepResult {
  float loss = 0.0f;        // mean cross-entropy of the micro-batch
  double grad_norm = 0.0;   // global L2 norm of the unscaled gradients (before clipping)
  bool skipped = false;     // fp16: a gradient overflowed, nothing was updated
  double loss_scale = 1.0;  // the loss scale this step used
};

// What both steps decide from a step's gradient check, with the same arithmetic, so that they
// agree bit for bit: the unscaled norm, whether to apply the update (fp16: not on overflow, which
// also updates the loss scale), the gradient multiplier for Adam (clip coefficient / loss
// scale) and Adam's step count (updates applied so far, for bias correction: a skipped step does
// not count, as in DeepSpeed).
class StepScaling {
 public:
  // fp16 models get a LossScaler (kConfig for bad fp16 options); others scale by 1.
  static Result<StepScaling> create(const OffloadStepOptions& options, DType model_dtype);

  float loss_scale() const { return scaler_ ? static_cast<float>(scaler_->scale()) : 1.0f; }
  bool fp16() const { return scaler_.has_value(); }

  struct Decision {
    double norm = 0.0;
    bool apply = false;
    float grad_scale = 1.0f;
    int64_t adam_step = 0;
  };
  // sum_squares and finite: of the gradients as computed (scaled). A non-finite gradient is an
  // error without fp16 (naming `step`), a skipped step with it. `ranks`: the gradients are the
  // sum over that many data-parallel ranks, and the update uses their mean (1: no division).
  Result<Decision> decide(double sum_squares, bool finite, int64_t step, double ranks = 1.0);
  int64_t applied() const { return applied_; }

  // Adam's step count and the loss scaler's counters, for checkpoints.
  struct State {
    int64_t applied = 0;
    LossScaler::State scaler;  // fp16 models only
  };
  State state() const { return {applied_, scaler_ ? scaler_->state() : LossScaler::State{}}; }
  void restore(const State& s) {
    applied_ = s.applied;
    if (scaler_) scaler_->restore(s.scaler);
  }

 private:
  std::optional<LossScaler> scaler_;
  float grad_clip_ = 0.0f;
  int64_t applied_ = 0;
};

// partition p -> model block: L-1, L-2, ..., 0, then L (the shared block).
std::vector<int64_t> partition_blocks(int64_t layers);
inline std::vector<int64_t> partition_blocks(const model::Model& model) {
  return partition_blocks(model.num_layers());
}

// The clip coefficient for a global norm (1 when clipping is off or the norm is within bounds).
float clip_coefficient(float grad_clip, double norm);

// The error for a non-finite gradient at `step` (shared wording of both steps).
Status nonfinite_gradient_error(int64_t step);

}  // namespace strata::engine
