// PlanReport: what `--plan` prints for one rank (DESIGN.md §4, §5): the bytes of every kind of
// state on each tier (device, pinned host, pageable host, NVMe) with each tier's peak against its
// budget, the bytes per step on each lane, and the predicted step time, all from the ZeRO step's
// own plan (engine::ZeroStep::memory(), engine::ZeroStep::predict()) and the optimizer's layout;
// built from a plan-only step (nothing allocated) or a real one (the same numbers).
//
// Peaks: device, what the model and the device optimizer allocate plus the plan's device peak;
// pinned host, the optimizer's arena and staging plus the plan's pinned peak; NVMe, the state
// stored there. The kinds of one tier need not add up to its peak: working buffers (gathered
// copies, gradients in flight, staging) are each their own peak over the step, and share the
// plan's arena.
//
// Values; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/offloaded_optimizer.h"
#include "engine/zero_step.h"
#include "gpu/device.h"
#include "scheduler/cost_model.h"

namespace strata::planner {

enum class ReportTier { kDevice = 0, kPinned, kPageable, kNvme };
inline constexpr int kNumReportTiers = 4;

struct PlanReport {
  struct Row {
    ReportTier tier;
    std::string kind;
    uint64_t bytes = 0;
  };
  std::vector<Row> rows;
  uint64_t peak[kNumReportTiers] = {};
  uint64_t budget[kNumReportTiers] = {};  // 0: none
  std::optional<sched::Prediction> prediction;
  Status fit;  // the budget check's verdict (engine::ZeroStep::fit() or create())
  // The table (tiers, kinds, peaks against budgets, lane bytes per step, predicted step time).
  std::string table() const;
};

struct PlanBudgets {
  uint64_t pageable_bytes = 0;  // the host batch (tokens and targets) this rank holds
  uint64_t host_limit = 0;      // --host-memory-limit (0: none)
  uint64_t nvme_free = 0;       // free bytes where the swap store would go (0: no NVMe)
  uint64_t nvme_extent = 0;     // the store's extent: each object takes whole extents (0: exact)
};

// Bytes for people: 812.0 KiB, 12.3 MiB, 1.25 GiB.
std::string human_bytes(uint64_t bytes);

PlanReport make_plan_report(const engine::ZeroStep& step,
                            const engine::OffloadedOptimizer& optimizer, const gpu::Device& device,
                            const PlanBudgets& budgets);

}  // namespace strata::planner
