// The planner (--plan) against the engine's own accounting at run time: for every case of
// planner_case.h, the peaks a plan-only build reports (nothing allocated: a PlanningDevice, a
// plan-only optimizer) are within 5% of what the real build of the same configuration takes
// after three steps: the device pool's high-water mark, the pinned pool's high-water mark (the
// optimizer's arena and staging, the plan's arena), and the swap store's bytes in use.
#include <gtest/gtest.h>

#include <cmath>

#include "planner_case.h"

namespace strata::engine::test {
namespace {
using namespace ::strata::planner;  // the planner under test (src/planner)

double rel(double a, double b) { return std::fabs(a - b) / std::max(b, 1.0); }

TEST(Planner, PlanOnlyBuildAllocatesNothing) {
  const PCase c{.name = "stage 3", .stage = 3, .nvme_fraction = 1.0};
  cpu::PinnedPool pool;
  auto plan = build(c, /*plan_only=*/true, nullptr, &pool);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(pool.peak_bytes(), 0u);
  EXPECT_EQ(plan->device->memory_info().peak_bytes, 0u);  // the real device
  EXPECT_GT(plan->planning->memory_info().used_bytes, 0u);
  EXPECT_TRUE(plan->step->plan_only());
  EXPECT_FALSE(plan->optimizer->read_state(0, nullptr, nullptr, nullptr).ok());
}

TEST(Planner, PlanPeaksMatchTheRunWithinFivePercent) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  for (const PCase& c : planner_cases()) {
    SCOPED_TRACE(c.name);
    PlanReport report;
    {
      cpu::PinnedPool pool;
      auto plan = build(c, true, nullptr, &pool);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      PlanBudgets budgets;
      budgets.nvme_extent = 64 << 10;  // open_store's
      report = make_plan_report(*plan->step, *plan->optimizer, plan->dev(), budgets);
      EXPECT_TRUE(report.fit.ok()) << report.fit.to_string();
    }
    std::unique_ptr<nvme::SwapStore> store = c.needs_store() ? open_store(dir.path()) : nullptr;
    const uint64_t store_before = store ? store->used_bytes() : 0;
    cpu::PinnedPool pool;
    auto real = build(c, false, store.get(), &pool);
    ASSERT_TRUE(real.ok()) << real.status().to_string();
    for (int64_t s = 1; s <= 3; ++s) {
      auto r = real->step->run(real->tokens.data(), real->targets.data(), s);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
    }
    const double device = double(real->device->memory_info().peak_bytes);
    const double pinned = double(pool.peak_bytes());
    const double dev_plan = double(report.peak[int(ReportTier::kDevice)]);
    const double pin_plan = double(report.peak[int(ReportTier::kPinned)]);
    std::printf(
        "%-70s device plan %10.0f run %10.0f (%+.2f%%); pinned plan %10.0f run %10.0f "
        "(%+.2f%%)\n",
        c.name.c_str(), dev_plan, device, 100 * (dev_plan - device) / device, pin_plan, pinned,
        100 * (pin_plan - pinned) / std::max(pinned, 1.0));
    EXPECT_LE(rel(dev_plan, device), 0.05);
    EXPECT_LE(rel(pin_plan, pinned), 0.05);
    // The report built from the real step says the same.
    const PlanReport again = make_plan_report(*real->step, *real->optimizer, *real->device, {});
    EXPECT_EQ(again.peak[int(ReportTier::kPinned)], report.peak[int(ReportTier::kPinned)]);
    if (store) {
      const double nvme = double(store->used_bytes() - store_before);
      const double nvme_plan = double(report.peak[int(ReportTier::kNvme)]);
      std::printf("%-70s NVMe plan %10.0f store %10.0f\n", "", nvme_plan, nvme);
      EXPECT_LE(rel(nvme_plan, nvme), 0.05);
    }
  }
}

TEST(Planner, TableNamesEveryTierAndTheVerdict) {
  const PCase c{
      .name = "stage 3 nvme", .stage = 3, .nvme_fraction = 0.5, .offload_param = Home::kNvme};
  cpu::PinnedPool pool;
  auto plan = build(c, true, nullptr, &pool);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  PlanBudgets budgets;
  budgets.pageable_bytes = 1024;
  budgets.host_limit = 1 << 30;
  budgets.nvme_free = uint64_t{1} << 40;
  const std::string t =
      make_plan_report(*plan->step, *plan->optimizer, plan->dev(), budgets).table();
  for (const char* want : {"device", "pinned host", "pageable host", "NVMe", "fp32 master + m + v",
                           "16-bit param shards", "peak", "fits: yes"}) {
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
  }
}

}  // namespace
}  // namespace strata::engine::test
