// LossScaler: DeepSpeed's fp16 dynamic loss scaling, checked on sequences worked out by hand
// from the rules in loss_scaler.h, and the refusal of bad options.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/loss_scaler.h"
#include "engine/offload_step.h"

namespace strata::engine {
namespace {

LossScaler make(LossScalerOptions o) {
  auto s = LossScaler::create(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.value();
}

TEST(LossScaler, StartsAtTwoToTheInitialPowerAndDoublesEveryWindow) {
  LossScalerOptions o;
  o.loss_scale_window = 3;
  LossScaler s = make(o);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_TRUE(s.update(false));  // third clean step: doubles
  EXPECT_EQ(s.scale(), 131072.0);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 262144.0);
}

TEST(LossScaler, HysteresisDelaysTheHalvingAndEveryOverflowSkips) {
  LossScalerOptions o;
  o.initial_scale_power = 4;  // 16
  o.loss_scale_window = 4;
  o.hysteresis = 2;
  LossScaler s = make(o);
  EXPECT_FALSE(s.update(true));  // first overflow: skipped, scale kept (budget 2 -> 1)
  EXPECT_EQ(s.scale(), 16.0);
  EXPECT_FALSE(s.update(true));  // second: skipped and halved
  EXPECT_EQ(s.scale(), 8.0);
  EXPECT_FALSE(s.update(true));  // the budget is not restored by overflows: halved again
  EXPECT_EQ(s.scale(), 4.0);
  // Growth counts clean steps from the last overflow: 4 of them, then the scale doubles and
  // the hysteresis budget is back to 2.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 4.0);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 8.0);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 8.0);
  EXPECT_EQ(s.skipped_steps(), 4);
}

TEST(LossScaler, WithoutHysteresisEachOverflowHalvesDownToTheMinimum) {
  LossScalerOptions o;
  o.initial_scale_power = 2;  // 4
  o.hysteresis = 1;
  o.min_loss_scale = 1.5;
  LossScaler s = make(o);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 2.0);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 1.5);  // not below the minimum
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 1.5);
}

// DeepSpeed stops when an overflow comes with the scale already at its minimum and no
// hysteresis left (raise_error_at_min_scale): every step after would be skipped.
TEST(LossScaler, AnOverflowAtTheMinimumScaleStopsTheRun) {
  OffloadStepOptions o;
  o.loss_scaling.initial_scale_power = 2;  // 4
  o.loss_scaling.hysteresis = 2;
  o.loss_scaling.min_loss_scale = 2.0;
  auto made = StepScaling::create(o, DType::kF16);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  StepScaling s = made.value();
  // 4, budget 2 -> 1: kept; 4 -> 2: halved to the minimum; at the minimum with budget 1: stop.
  for (int step = 1; step <= 2; ++step) {
    auto d = s.decide(1.0, /*finite=*/false, step);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_FALSE(d->apply);
  }
  EXPECT_EQ(s.loss_scale(), 2.0f);
  const auto stopped = s.decide(1.0, false, 3);
  ASSERT_FALSE(stopped.ok());
  EXPECT_NE(stopped.status().message().find("step 3: the gradients overflow with the fp16 loss "
                                            "scale already at its minimum 2"),
            std::string::npos)
      << stopped.status().to_string();
  // A static scale is not lowered: DeepSpeed skips its overflows without stopping.
  o.loss_scaling.loss_scale = 2.0;
  StepScaling fixed = StepScaling::create(o, DType::kF16).value();
  for (int step = 1; step <= 5; ++step) EXPECT_TRUE(fixed.decide(1.0, false, step).ok());
  // Without fp16 a non-finite gradient stops at once.
  StepScaling bf16 = StepScaling::create(o, DType::kBF16).value();
  EXPECT_FALSE(bf16.decide(1.0, false, 1).ok());
}

TEST(LossScaler, ConsecutiveHysteresisRestoresTheBudgetAfterACleanStep) {
  LossScalerOptions o;
  o.initial_scale_power = 4;
  o.loss_scale_window = 100;
  o.hysteresis = 2;
  o.consecutive_hysteresis = true;
  LossScaler s = make(o);
  EXPECT_FALSE(s.update(true));  // budget 2 -> 1
  EXPECT_TRUE(s.update(false));  // restored to 2
  EXPECT_FALSE(s.update(true));  // 2 -> 1 again: no halving
  EXPECT_EQ(s.scale(), 16.0);
  o.consecutive_hysteresis = false;
  LossScaler t = make(o);
  EXPECT_FALSE(t.update(true));
  EXPECT_TRUE(t.update(false));  // not restored
  EXPECT_FALSE(t.update(true));  // halves
  EXPECT_EQ(t.scale(), 8.0);
}

TEST(LossScaler, AStaticScaleNeverChangesButOverflowStillSkips) {
  LossScalerOptions o;
  o.loss_scale = 128.0;
  o.loss_scale_window = 1;
  LossScaler s = make(o);
  EXPECT_FALSE(s.dynamic());
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 128.0);
}

TEST(LossScaler, BadOptionsNameTheDeepSpeedKey) {
  auto expect_refused = [](LossScalerOptions o, const std::string& key) {
    const auto s = LossScaler::create(o);
    ASSERT_EQ(s.status().code(), ErrorCode::kConfig);
    EXPECT_NE(s.status().message().find(key), std::string::npos) << s.status().message();
  };
  LossScalerOptions o;
  o.loss_scale = -1;
  expect_refused(o, "fp16.loss_scale");
  o = {};
  o.initial_scale_power = 65;
  expect_refused(o, "fp16.initial_scale_power");
  o = {};
  o.loss_scale_window = 0;
  expect_refused(o, "fp16.loss_scale_window");
  o = {};
  o.hysteresis = 0;
  expect_refused(o, "fp16.hysteresis");
  o = {};
  o.min_loss_scale = 0;
  expect_refused(o, "fp16.min_loss_scale");
  o = {};
  o.loss_scale = 1e39;  // not a float
  expect_refused(o, "fp16.loss_scale");
  o.loss_scale = 1e-50;
  expect_refused(o, "fp16.loss_scale");
}

TEST(LossScaler, GrowthStopsAtTwoToTheSixtyFour) {
  LossScalerOptions o;
  o.initial_scale_power = 63;
  o.loss_scale_window = 1;
  LossScaler s = make(o);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), std::ldexp(1.0, 64));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), std::ldexp(1.0, 64));
}

}  // namespace
}  // namespace strata::engine
