// The pre-flight budget checks (engine/memory_budget.h): within the budget they pass; over it
// the one-line refusal names the tier's flag, the bytes needed and the budget, and the advised
// NVMe share of the optimizer state is the smallest larger one (in steps of 0.05) whose
// pinned side fits, found here by a separate scan of the same needs.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "engine/memory_budget.h"

namespace strata::engine {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// A model of the optimizer side: 100 MiB of fp32 state; a share f on NVMe leaves (1 - f) of it
// in RAM and takes 4 MiB of staging.
uint64_t optimizer_side(double f) {
  return static_cast<uint64_t>((1.0 - f) * 100.0 * kMiB) + (f > 0 ? 4 * kMiB : 0);
}

PinnedNeeds needs() {
  PinnedNeeds n;
  n.optimizer_state = optimizer_side(0.0);
  n.plan = 30 * kMiB;
  n.param_shards = 20 * kMiB;
  n.optimizer_at = optimizer_side;
  n.optimizer_now = optimizer_side(0.0);
  return n;
}

TEST(MemoryBudget, WithinTheBudgetPasses) {
  EXPECT_TRUE(check_pinned_budget(needs(), 0).ok());  // no limit
  EXPECT_TRUE(check_pinned_budget(needs(), 130 * kMiB).ok());
  DeviceNeeds d;
  d.in_use = 10 * kMiB;
  d.plan = 5 * kMiB;
  EXPECT_TRUE(check_device_budget(d, 15 * kMiB).ok());
}

TEST(MemoryBudget, PinnedRefusalNamesBytesBudgetAndTheSmallestFittingShare) {
  for (uint64_t limit_mib : {60, 90, 115, 129}) {
    const uint64_t limit = limit_mib * kMiB;
    const Status st = check_pinned_budget(needs(), limit);
    ASSERT_FALSE(st.ok()) << limit_mib;
    EXPECT_EQ(st.code(), ErrorCode::kOutOfMemory);
    const std::string m = st.to_string();
    SCOPED_TRACE(m);
    EXPECT_EQ(m.find('\n'), std::string::npos);
    EXPECT_NE(m.find("`storage.host_memory_limit` " + std::to_string(limit_mib) + ".0 MiB"),
              std::string::npos);
    EXPECT_NE(m.find("needs 130.0 MiB"), std::string::npos);
    EXPECT_NE(m.find("`storage.host_memory_limit` 130MiB"), std::string::npos);
    // The reference scan: the smallest k/20 with the rest (30 MiB) + the optimizer side within.
    int want = 0;
    for (int k = 1; k <= 20 && want == 0; ++k) {
      if (30 * kMiB + optimizer_side(k / 20.0) <= limit) want = k;
    }
    if (want == 0) {
      EXPECT_EQ(m.find("`optimizer.nvme_fraction`"), std::string::npos);
    } else {
      char flag[64];
      std::snprintf(flag, sizeof flag, "`optimizer.nvme_fraction` %g", want / 20.0);
      EXPECT_NE(m.find(flag), std::string::npos) << flag;
    }
    // Moving the 20 MiB of parameter shards is advised only when that is enough.
    EXPECT_EQ(m.find("`zero.offload_param` nvme") != std::string::npos, 130 - limit_mib <= 20);
  }
}

TEST(MemoryBudget, DeviceRefusalNamesTheFields) {
  DeviceNeeds d;
  d.in_use = 10 * kMiB;
  d.plan = 6 * kMiB;
  d.stage = 2;
  d.activations = 2 * kMiB;
  const std::string m = check_device_budget(d, 15 * kMiB).to_string();
  EXPECT_NE(m.find("`storage.gpu_memory_limit` 15.0 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("needs 16.0 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("`zero.stage` 3"), std::string::npos) << m;
  EXPECT_NE(m.find("`zero.offload_activations` cpu"), std::string::npos) << m;
  EXPECT_NE(m.find("`storage.gpu_memory_limit` 16MiB"), std::string::npos) << m;
}

}  // namespace
}  // namespace strata::engine
