#include "engine/offload_step.h"

#include <cmath>

#include "engine/engine_config.h"

namespace strata::engine {

std::vector<int64_t> partition_blocks(int64_t layers) {
  std::vector<int64_t> blocks;
  for (int64_t l = layers - 1; l >= 0; --l) blocks.push_back(l);
  blocks.push_back(layers);
  return blocks;
}

float clip_coefficient(float grad_clip, double norm) {
  return grad_clip > 0.0f && norm > grad_clip ? static_cast<float>(grad_clip / norm) : 1.0f;
}

Result<StepScaling> StepScaling::create(const OffloadStepOptions& options, DType model_dtype) {
  StepScaling s;
  s.grad_clip_ = options.grad_clip;
  if (model_dtype == DType::kF16) {
    STRATA_ASSIGN_OR_RETURN(LossScaler scaler, LossScaler::create(options.loss_scaling));
    s.scaler_ = scaler;
  }
  return s;
}

Result<StepScaling::Decision> StepScaling::decide(double sum_squares, bool finite, int64_t step,
                                                  double ranks) {
  const double scale = loss_scale() * ranks;
  Decision d;
  d.norm = std::sqrt(sum_squares) / scale;
  if (!finite) {
    if (!scaler_) return nonfinite_gradient_error(step);
    // DeepSpeed's raise_error_at_min_scale: an overflow with nothing left to lower stops the run
    // instead of skipping every step that follows.
    if (scaler_->exhausted()) {
      return make_error(ErrorCode::kInternal, "step ", step,
                        ": the gradients overflow with the fp16 loss scale already at its minimum ",
                        scaler_->scale(),
                        " (fp16.min_loss_scale); stopped (lower the learning rate, train in bf16, "
                        "or check the model for non-finite values)");
    }
    scaler_->update(true);
    return d;  // skipped
  }
  d.apply = true;
  d.grad_scale =
      static_cast<float>(static_cast<double>(clip_coefficient(grad_clip_, d.norm)) / scale);
  if (scaler_) scaler_->update(false);
  d.adam_step = ++applied_;
  return d;
}

Status nonfinite_gradient_error(int64_t step) {
  return make_error(ErrorCode::kInternal, "step ", step, ": non-finite gradient (lower ",
                    ref(Field::kLr), ")");
}

}  // namespace strata::engine
