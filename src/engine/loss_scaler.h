// LossScaler: the fp16 loss scale, static or dynamic with DeepSpeed's `fp16` semantics
// (REFERENCE.md: initial_scale_power, loss_scale_window, hysteresis, min_loss_scale).
//
// The engine multiplies the loss by scale() before backward and the gradients by 1/scale()
// in the optimizer (with the clip coefficient). After each step's overflow check (a NaN or Inf
// in any gradient, on any rank) it calls update(overflow):
//   overflow: the step is skipped (no parameter, no moment changes). If the hysteresis budget
//     is down to 1, the scale is divided by 2 (not below min_loss_scale); otherwise the budget
//     shrinks by one and the scale stays.
//   no overflow: the step is applied; every loss_scale_window steps counted from the last
//     overflow (or from the start), the scale doubles (up to 2^64) and the hysteresis budget is
//     restored (with consecutive_hysteresis, the budget is restored after every clean step
//     instead).
// A static scale (loss_scale > 0) never changes, and an overflow still skips the step.
// Value type; not thread-safe.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace strata::engine {

struct LossScalerOptions {
  double loss_scale = 0.0;           // > 0: static scale; 0: dynamic (DeepSpeed's fp16.loss_scale)
  int initial_scale_power = 16;      // dynamic: the first scale is 2^this
  int64_t loss_scale_window = 1000;  // clean steps between doublings
  int hysteresis = 2;                // overflows tolerated before the scale is halved
  double min_loss_scale = 1.0;       // the scale never goes below this
  bool consecutive_hysteresis = false;
};

class LossScaler {
 public:
  // kConfig naming the DeepSpeed key, the value and the accepted range for a bad option.
  static Result<LossScaler> create(const LossScalerOptions& options);

  double scale() const { return scale_; }
  bool dynamic() const { return options_.loss_scale <= 0.0; }
  // Records one step's overflow check; returns whether that step's update is to be applied.
  bool update(bool overflow);
  int64_t skipped_steps() const { return skipped_; }
  // Dynamic scaling whose next overflow would lower the scale, already at min_loss_scale: the
  // run cannot recover from one (the caller stops, as DeepSpeed does).
  bool exhausted() const {
    return dynamic() && hysteresis_left_ <= 1 && scale_ <= options_.min_loss_scale;
  }

  // The scaler's counters, for checkpoints: restoring them continues the same sequence.
  struct State {
    double scale = 1.0;
    int hysteresis_left = 0;
    int64_t iter = 0, last_overflow_iter = -1, skipped = 0;
  };
  State state() const { return {scale_, hysteresis_left_, iter_, last_overflow_iter_, skipped_}; }
  void restore(const State& s) {
    scale_ = s.scale;
    hysteresis_left_ = s.hysteresis_left;
    iter_ = s.iter;
    last_overflow_iter_ = s.last_overflow_iter;
    skipped_ = s.skipped;
  }

 private:
  explicit LossScaler(const LossScalerOptions& options) : options_(options) {}

  LossScalerOptions options_;
  double scale_ = 1.0;
  int hysteresis_left_ = 0;
  int64_t iter_ = 0;
  int64_t last_overflow_iter_ = -1;
  int64_t skipped_ = 0;
};

}  // namespace strata::engine
