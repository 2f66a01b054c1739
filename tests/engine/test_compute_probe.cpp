// The compute probe's hand-off (compute_probe.h): what the cost model leaves unexplained of the
// probe's step-shaped replays per op. The reference is the probe's plans counted by hand: per
// copy of n ops (5 and 7; 3 and 4 of them backward), a gather and an upload before each op and
// a reduction after each backward one.
//   - shared cores: every task runs alone, so the step shape adds a gather, an upload and the
//     reductions at a task's overhead each: (2 * 12 + 7) / 12 overheads per op;
//   - a device of its own: the gathers and uploads of ops 2.. run beside the op before, so the
//     shape adds the first op's gather and upload and the last op's reduction: 3 overheads per
//     copy, 6 / 12 per op.
#include <gtest/gtest.h>

#include "engine/compute_probe.h"

namespace strata::engine {
namespace {

sched::Rates rates(bool shared, double overhead) {
  sched::Rates r;
  for (double& x : r.per_second) x = 1e9;
  r.task_overhead_s = overhead;
  r.shared_cores = shared;
  r.handoff_s = 1.0;  // ignored by the fit
  return r;
}

TEST(ComputeProbe, HandOffIsTheStepShapesExtraTheCostModelDoesNotCharge) {
  ComputeProbe p;
  p.op_s = 1e-3;
  p.step_extra_s = 300e-6;
  const double o = 10e-6;
  auto shared = fit_handoff(p, rates(true, o));
  ASSERT_TRUE(shared.ok()) << shared.status().to_string();
  EXPECT_NEAR(*shared, 300e-6 - (2.0 * 12 + 7) / 12 * o, 1e-12);
  auto own = fit_handoff(p, rates(false, o));
  ASSERT_TRUE(own.ok()) << own.status().to_string();
  EXPECT_NEAR(*own, 300e-6 - 6.0 / 12 * o, 1e-12);
  // No overhead: all of it.
  auto none = fit_handoff(p, rates(true, 0.0));
  ASSERT_TRUE(none.ok());
  EXPECT_NEAR(*none, 300e-6, 1e-12);
  // A step shape that came out faster than the ops back to back: no hand-off, not a negative one.
  p.step_extra_s = -50e-6;
  auto faster = fit_handoff(p, rates(true, o));
  ASSERT_TRUE(faster.ok());
  EXPECT_EQ(*faster, 0.0);
}

}  // namespace
}  // namespace strata::engine
