// The learning-rate schedules against values worked out by hand from their definitions
// (lr_schedule.h): lr 1, floor 0.1, W = 4 warm-up steps of N = 12.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "lr_schedule.h"

namespace strata::train_gpt {
namespace {

LrSchedule schedule(const std::string& kind, const std::string& warmup_kind = "linear") {
  LrSchedule s;
  s.lr = 1.0;
  s.min_lr = 0.1;
  s.warmup = 4;
  s.steps = 12;
  s.kind = kind;
  s.warmup_kind = warmup_kind;
  return s;
}

TEST(LrSchedule, WarmupLinearAndLog) {
  const LrSchedule lin = schedule("constant");
  EXPECT_DOUBLE_EQ(lr_at(lin, 1), 0.25);
  EXPECT_DOUBLE_EQ(lr_at(lin, 2), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(lin, 4), 1.0);
  const LrSchedule log = schedule("constant", "log");
  EXPECT_DOUBLE_EQ(lr_at(log, 1), 0.0);  // ln 1 = 0
  EXPECT_DOUBLE_EQ(lr_at(log, 2), 0.5);  // ln 2 / ln 4
  EXPECT_DOUBLE_EQ(lr_at(log, 4), 1.0);
}

TEST(LrSchedule, ConstantCosineLinearAfterTheWarmup) {
  for (int64_t s = 5; s <= 12; ++s) EXPECT_DOUBLE_EQ(lr_at(schedule("constant"), s), 1.0);
  // The decay starts at the peak on the first step after the warm-up (step W + 1), as llm.c's.
  const LrSchedule cos = schedule("cosine");
  EXPECT_DOUBLE_EQ(lr_at(cos, 5), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(cos, 9), 0.55);  // halfway: the mean of lr and the floor
  EXPECT_NEAR(lr_at(cos, 7), 0.1 + 0.9 * (1 + std::sqrt(0.5)) / 2, 1e-15);  // a quarter: cos 45°
  EXPECT_NEAR(lr_at(cos, 12), 0.1 + 0.9 * (1 + std::cos(std::numbers::pi * 7 / 8)) / 2, 1e-15);
  const LrSchedule lin = schedule("linear");
  EXPECT_DOUBLE_EQ(lr_at(lin, 5), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(lin, 6), 0.8875);   // 0.1 + 0.9 * 7/8
  EXPECT_DOUBLE_EQ(lr_at(lin, 12), 0.2125);  // 0.1 + 0.9 * 1/8
  for (int64_t s = 5; s < 12; ++s) {
    EXPECT_GT(lr_at(cos, s), lr_at(cos, s + 1));
    EXPECT_GT(lr_at(lin, s), lr_at(lin, s + 1));
  }
}

// llm.c's get_learning_rate (train_gpt2.cu), written out from its formula with its 0-based step
// in double: warm-up lr (step + 1) / W, then min + (lr - min) (1 + cos(pi (step - W) / (N - W))) /
// 2 with min = lr * final_learning_rate_frac. strata's step s is llm.c's step s - 1.
double llmc_cosine(double lr, double frac, int64_t warmup, int64_t steps, int64_t step) {
  if (step < warmup) return lr * double(step + 1) / double(warmup);
  const double ratio = double(step - warmup) / double(steps - warmup);
  const double min_lr = lr * frac;
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * ratio)) * (lr - min_lr);
}

TEST(LrSchedule, CosineIsLlmcsStepByStep) {
  LrSchedule s;
  s.lr = 1e-3;
  s.min_lr = 1e-4;
  s.warmup = 5;
  s.steps = 40;
  s.kind = "cosine";
  for (int64_t step = 1; step <= s.steps; ++step) {
    EXPECT_NEAR(lr_at(s, step), llmc_cosine(1e-3, 0.1, 5, 40, step - 1), 1e-15) << step;
  }
  EXPECT_DOUBLE_EQ(lr_at(s, 6), 1e-3);  // the figure: llm.c's step 6 is the peak
  EXPECT_GT(lr_at(s, 40), 1e-4);        // and its last step is above the floor
}

TEST(LrSchedule, BadSchedulesNameTheFlag) {
  LrSchedule s = schedule("step");
  EXPECT_NE(check_schedule(s).to_string().find("--lr-schedule 'step'"), std::string::npos);
  s = schedule("cosine", "exp");
  EXPECT_NE(check_schedule(s).to_string().find("--warmup-type 'exp'"), std::string::npos);
  s = schedule("cosine");
  s.min_lr = 2.0;
  EXPECT_NE(check_schedule(s).to_string().find("--lr-min 2"), std::string::npos);
  s = schedule("cosine");
  s.warmup = 13;
  s.decay_given = true;  // a decay shorter than its warm-up
  EXPECT_NE(check_schedule(s).to_string().find("--warmup 13"), std::string::npos);
  EXPECT_TRUE(check_schedule(schedule("linear")).ok());
}

// A warm-up longer than the run (a short smoke test of a real config): accepted, and every
// step of the run is in the warm-up.
TEST(LrSchedule, AWarmUpLongerThanTheRunIsAccepted) {
  for (const char* kind : {"constant", "cosine", "linear"}) {
    LrSchedule s = schedule(kind);
    s.warmup = 1000;
    ASSERT_TRUE(check_schedule(s).ok()) << kind;
    for (int64_t step = 1; step <= s.steps; ++step) {
      EXPECT_DOUBLE_EQ(lr_at(s, step), s.lr * double(step) / 1000.0) << kind << " step " << step;
    }
  }
}

}  // namespace
}  // namespace strata::train_gpt
