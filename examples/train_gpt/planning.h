// The planner in train_gpt (planner/plan_report.h, planner/session_prediction.h): the predicted
// step time,
// --plan's table, and the predicted against the measured step time after a run.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/session.h"
#include "flags.h"
#include "gpu/device.h"
#include "planner/plan_report.h"

namespace strata::train_gpt {

// Calibrates (cached unless `redo`: --calibrate) on `real` and predicts the session's step
// time; on failure, nothing (the reason printed on rank 0). Every rank calls it.
std::optional<sched::Prediction> predict(const engine::Session& session, gpu::Device& real,
                                         bool redo, bool lead);

// The budgets the report shows against: the host batch, --host-memory-limit, the free space
// under the NVMe directories, the swap store's extent.
planner::PlanBudgets plan_budgets(const Flags& f, int64_t seq, int ranks,
                                  const std::vector<std::string>& nvme_dirs);

// --plan: the table of the session's ZeRO step on rank 0.
void print_plan(const engine::Session& session, const gpu::Device& device,
                const planner::PlanBudgets& budgets,
                const std::optional<sched::Prediction>& prediction, int rank, int ranks);

// The measured step times of a run, against the prediction.
class StepTimes {
 public:
  // Step `step` took `ms`; the first two steps of a run (warm-up) are left out.
  void add(int64_t step, int64_t first_step, double ms) {
    if (step >= first_step + 2) ms_.push_back(ms);
  }
  // "plan: predicted step 70.1 ms, measured 73.4 ms (median of 40 steps), error -4.5%", or empty.
  std::string versus(const std::optional<sched::Prediction>& prediction) const;

 private:
  std::vector<double> ms_;
};

}  // namespace strata::train_gpt
