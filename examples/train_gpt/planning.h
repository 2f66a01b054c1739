// The planner in train_gpt (engine/plan_report.h, engine/calibration.h): the calibration request
// the flags describe, the predicted step time, --plan's table, and the predicted against the
// measured step time after a run.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/calibration.h"
#include "engine/offloaded_optimizer.h"
#include "engine/plan_report.h"
#include "engine/zero_step.h"
#include "flags.h"
#include "gpu/device.h"
#include "model/config.h"

namespace strata::train_gpt {

engine::CalibrationRequest calibration_request(
    const Flags& f, gpu::Device& real, const model::GptConfig& cfg, const model::RunShape& shape,
    comm::Communicator& comm, const std::vector<std::string>& nvme_dirs, int host_threads);

// Calibrates (cached unless --calibrate) and predicts the step time of `step` with the flags'
// micro-batches; on failure, nothing (the reason printed on rank 0). Every rank calls it.
std::optional<sched::Prediction> predict(const engine::ZeroStep& step,
                                         const engine::CalibrationRequest& request, const Flags& f,
                                         bool lead);

// The budgets the report shows against: the host batch, --host-memory-limit, the free space
// under the NVMe directories, the swap store's extent.
engine::PlanBudgets plan_budgets(const Flags& f, int64_t seq, int ranks,
                                 const std::vector<std::string>& nvme_dirs);

// --plan: the table on rank 0.
void print_plan(const engine::ZeroStep& step, const engine::OffloadedOptimizer& optimizer,
                const gpu::Device& device, const engine::PlanBudgets& budgets,
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
