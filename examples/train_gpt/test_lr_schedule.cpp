// The learning-rate schedules against values worked out by hand from their definitions
// (lr_schedule.h): lr 1, floor 0.1, W = 4 warm-up steps of N = 12.
#include <gtest/gtest.h>

#include <cmath>

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
  const LrSchedule cos = schedule("cosine");
  EXPECT_DOUBLE_EQ(lr_at(cos, 8), 0.55);  // halfway: the mean of lr and the floor
  EXPECT_NEAR(lr_at(cos, 6), 0.1 + 0.9 * (1 + std::sqrt(0.5)) / 2, 1e-15);  // a quarter: cos 45°
  EXPECT_DOUBLE_EQ(lr_at(cos, 12), 0.1);
  const LrSchedule lin = schedule("linear");
  EXPECT_DOUBLE_EQ(lr_at(lin, 6), 0.775);  // 0.1 + 0.9 * 6/8
  EXPECT_DOUBLE_EQ(lr_at(lin, 12), 0.1);
  for (int64_t s = 5; s < 12; ++s) {
    EXPECT_GT(lr_at(cos, s), lr_at(cos, s + 1));
    EXPECT_GT(lr_at(lin, s), lr_at(lin, s + 1));
  }
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
  EXPECT_NE(check_schedule(s).to_string().find("--warmup 13"), std::string::npos);
  EXPECT_TRUE(check_schedule(schedule("linear")).ok());
}

}  // namespace
}  // namespace strata::train_gpt
