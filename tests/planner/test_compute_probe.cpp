// The compute probe's hand-off (compute_probe.h): what the cost model leaves unexplained of the
// probe's step-shaped replays per op. The reference is the probe's plans counted by hand: per
// copy of n ops (5 and 7; 3 and 4 of them backward), a gather and an upload before each op and
// a reduction after each backward one; each task costs the overhead o, a gather also its call's
// latency and bytes (g), an upload its bytes (u), a reduction its call and bytes (r).
//   - shared cores: every task runs alone, so the step shape adds all of them: per op
//     (12 (o + g) + 12 (o + u) + 7 (o + r)) / 12;
//   - a device of its own: the gathers and uploads of ops 2.. and the reductions but the last
//     run beside the op before, so the shape adds the first op's gather and upload and the last
//     op's reduction: per op 2 (3 o + g + u + r) / 12.
#include <gtest/gtest.h>

#include "planner/compute_probe.h"

namespace strata::engine {
namespace {
using namespace ::strata::planner;  // the planner under test (src/planner)

using sched::Work;

// The probe's calls among two ranks: an all-gather of 8 16-bit elements per rank sends 16 bytes,
// an all-reduce of 8 sends 2 (n - 1) / n of its 16: 16 bytes; each upload moves 4096 bytes.
constexpr double kGather = 10e-6 + 1e-6, kUpload = 1e-6, kReduce = 20e-6 + 2e-6;

sched::Rates rates(bool shared, double overhead, bool network = true) {
  sched::Rates r;
  for (double& x : r.per_second) x = 1e30;
  r.per_second[int(Work::kFlops)] = 1e9;
  if (network) {
    r.per_second[int(Work::kNetCalls)] = 1.0 / 10e-6;
    r.per_second[int(Work::kNetBytes)] = 16.0 / 1e-6;
    r.per_second[int(Work::kNetReduceCalls)] = 1.0 / 20e-6;
    r.per_second[int(Work::kNetReduceBytes)] = 16.0 / 2e-6;
    r.per_second[int(Work::kH2DBytes)] = 4096.0 / 1e-6;
  }
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
  auto shared = fit_handoff(p, rates(true, o), 2);
  ASSERT_TRUE(shared.ok()) << shared.status().to_string();
  EXPECT_NEAR(*shared, 300e-6 - (12 * (o + kGather) + 12 * (o + kUpload) + 7 * (o + kReduce)) / 12,
              1e-12);
  auto own = fit_handoff(p, rates(false, o), 2);
  ASSERT_TRUE(own.ok()) << own.status().to_string();
  EXPECT_NEAR(*own, 300e-6 - 2 * (3 * o + kGather + kUpload + kReduce) / 12, 1e-12);
  // At one rank the calls still cost their latency (calibration makes it 0 there), but send
  // nothing.
  auto one = fit_handoff(p, rates(false, o), 1);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_NEAR(*one, 300e-6 - 2 * (3 * o + 10e-6 + kUpload + 20e-6) / 12, 1e-12);
  // Nothing charged: all of it.
  auto none = fit_handoff(p, rates(true, 0.0, false), 2);
  ASSERT_TRUE(none.ok());
  EXPECT_NEAR(*none, 300e-6, 1e-12);
  // A step shape that came out faster than the ops back to back: no hand-off, not a negative one.
  p.step_extra_s = -50e-6;
  auto faster = fit_handoff(p, rates(true, o), 2);
  ASSERT_TRUE(faster.ok());
  EXPECT_EQ(*faster, 0.0);
}

}  // namespace
}  // namespace strata::engine
