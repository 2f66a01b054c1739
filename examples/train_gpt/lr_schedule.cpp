#include "lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace strata::train_gpt {

Status check_schedule(const LrSchedule& s) {
  if (s.kind != "constant" && s.kind != "cosine" && s.kind != "linear") {
    return make_error(ErrorCode::kConfig, "--lr-schedule '", s.kind,
                      "' is not accepted (use constant, cosine or linear)");
  }
  if (s.warmup_kind != "linear" && s.warmup_kind != "log") {
    return make_error(ErrorCode::kConfig, "--warmup-type '", s.warmup_kind,
                      "' is not accepted (use linear or log)");
  }
  if (s.min_lr > s.lr) {
    return make_error(ErrorCode::kConfig, "--lr-min ", s.min_lr, " is above --lr ", s.lr,
                      " (use a floor from 0 to the peak rate)");
  }
  if (s.warmup > s.steps && s.decay_given && s.kind != "constant") {
    return make_error(ErrorCode::kConfig, "--warmup ", s.warmup, " is longer than the decay's ",
                      s.steps, " steps (--lr-decay-steps; use a shorter warm-up)");
  }
  return ok_status();
}

double lr_at(const LrSchedule& s, int64_t step) {
  const auto w = static_cast<double>(s.warmup);
  const auto x = static_cast<double>(step);
  if (step <= s.warmup) {
    if (s.warmup_kind == "log") return s.warmup == 1 ? s.lr : s.lr * std::log(x) / std::log(w);
    return s.lr * x / w;
  }
  if (s.kind == "constant" || s.steps == s.warmup) return s.lr;
  // llm.c's alignment: step W + 1 starts the decay at the peak (its 0-based step W).
  const double progress = std::clamp((x - 1.0 - w) / (static_cast<double>(s.steps) - w), 0.0, 1.0);
  if (s.kind == "cosine") {
    return s.min_lr + (s.lr - s.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return s.min_lr + (s.lr - s.min_lr) * (1.0 - progress);
}

}  // namespace strata::train_gpt
