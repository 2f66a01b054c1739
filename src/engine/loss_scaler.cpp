#include "engine/loss_scaler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace strata::engine {

namespace {
constexpr double kMaxScale = 18446744073709551616.0;  // 2^64: growth stops there
}  // namespace

Result<LossScaler> LossScaler::create(const LossScalerOptions& o) {
  if (!(o.loss_scale == 0.0 || (o.loss_scale >= FLT_MIN && o.loss_scale <= FLT_MAX))) {
    return make_error(ErrorCode::kConfig, "fp16.loss_scale ", o.loss_scale,
                      " is not accepted (0 for dynamic scaling, or a scale a float holds: ",
                      FLT_MIN, "..", FLT_MAX, ")");
  }
  if (o.initial_scale_power < 0 || o.initial_scale_power > 64) {
    return make_error(ErrorCode::kConfig, "fp16.initial_scale_power ", o.initial_scale_power,
                      " is not accepted (0..64)");
  }
  if (o.loss_scale_window < 1) {
    return make_error(ErrorCode::kConfig, "fp16.loss_scale_window ", o.loss_scale_window,
                      " is not accepted (>= 1)");
  }
  if (o.hysteresis < 1) {
    return make_error(ErrorCode::kConfig, "fp16.hysteresis ", o.hysteresis,
                      " is not accepted (>= 1)");
  }
  if (!(o.min_loss_scale >= FLT_MIN && o.min_loss_scale <= kMaxScale)) {
    return make_error(ErrorCode::kConfig, "fp16.min_loss_scale ", o.min_loss_scale,
                      " is not accepted (", FLT_MIN, "..2^64)");
  }
  LossScaler s(o);
  s.scale_ = o.loss_scale > 0.0 ? o.loss_scale : std::ldexp(1.0, o.initial_scale_power);
  s.hysteresis_left_ = o.hysteresis;
  return s;
}

bool LossScaler::update(bool overflow) {
  const int64_t iter = iter_++;
  if (overflow) ++skipped_;
  if (!dynamic()) return !overflow;
  if (overflow) {
    if (hysteresis_left_ <= 1) {
      scale_ = std::max(scale_ / 2.0, options_.min_loss_scale);
    } else {
      --hysteresis_left_;
    }
    last_overflow_iter_ = iter;
    return false;
  }
  if (options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
  if ((iter - last_overflow_iter_) % options_.loss_scale_window == 0) {
    hysteresis_left_ = options_.hysteresis;
    scale_ = std::min(scale_ * 2.0, kMaxScale);
  }
  return true;
}

}  // namespace strata::engine
