// The learning rate of each step: a warm-up from 0, then constant, cosine or linear decay to a
// floor at the last step. The formulas (s: the 1-based step, W: warm-up steps, N: all steps):
//   warm-up (s <= W):  lr * s / W (linear, llm.c's), or lr * ln(s) / ln(W) (log, DeepSpeed
//                      WarmupLR's default; W = 1 gives lr)
//   constant:          lr
//   cosine:            min + (lr - min) * (1 + cos(pi * (s - 1 - W) / (N - W))) / 2
//   linear:            min + (lr - min) * (N - s + 1) / (N - W)
// llm.c's alignment (its 0-based step is s - 1): the first step after the warm-up is at the peak
// and the last one (s = N) just above the floor.
// DeepSpeed's schedulers map to these: WarmupLR -> constant, WarmupCosineLR -> cosine,
// WarmupDecayLR -> linear (docs/training.md).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata::train_gpt {

struct LrSchedule {
  double lr = 3e-3;
  double min_lr = 0.0;                 // the floor of the decay
  int64_t warmup = 0;                  // W
  int64_t steps = 1;                   // N
  bool decay_given = false;            // N is --lr-decay-steps, not the run's --steps
  std::string kind = "constant";       // constant | cosine | linear
  std::string warmup_kind = "linear";  // linear | log
};

// kConfig naming the flag for a kind or warm-up kind not accepted, min_lr > lr, or a decay
// (--lr-decay-steps) shorter than its warm-up. A warm-up longer than the run is accepted: the
// schedule is what was asked for, the run ends during its warm-up.
Status check_schedule(const LrSchedule& s);
// The rate of step s (1-based), computed in double.
double lr_at(const LrSchedule& s, int64_t step);

}  // namespace strata::train_gpt
