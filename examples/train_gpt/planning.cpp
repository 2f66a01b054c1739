#include "planning.h"

#include <sys/statvfs.h>

#include <cstdio>

#include "config_fields.h"
#include "core/median.h"
#include "engine/session.h"
#include "planner/session_prediction.h"

namespace strata::train_gpt {

std::optional<sched::Prediction> predict(const engine::Session& session, gpu::Device& real,
                                         bool redo, bool lead) {
  auto cal = planner::calibrate(session, real, redo);
  if (!cal.ok()) {
    if (lead)
      std::printf("plan: no prediction: %s\n", with_flag_names(cal.status()).to_string().c_str());
    return std::nullopt;
  }
  if (lead && cal->measured > 0) {
    std::printf("plan: calibrated %d rates of this machine (%s):\n%s", cal->measured,
                cal->cache_path.c_str(), cal->describe().c_str());
  }
  auto p = planner::predict(session, cal->rates);
  if (!p.ok()) {
    if (lead)
      std::printf("plan: no prediction: %s\n", with_flag_names(p.status()).to_string().c_str());
    return std::nullopt;
  }
  return *p;
}

planner::PlanBudgets plan_budgets(const Flags& f, int64_t seq, int ranks,
                                  const std::vector<std::string>& nvme_dirs) {
  planner::PlanBudgets b;
  // This rank's micro-batches and the global batch the data gives, tokens and targets.
  const auto rows = static_cast<uint64_t>(f.batch * seq);
  b.pageable_bytes = 2 * 4 * rows * (static_cast<uint64_t>(f.grad_accum) + uint64_t(ranks));
  b.host_limit = f.host_memory_limit;
  for (const std::string& d : nvme_dirs) {
    struct statvfs vfs {};
    if (statvfs(d.c_str(), &vfs) == 0) b.nvme_free += uint64_t(vfs.f_bavail) * vfs.f_frsize;
  }
  b.nvme_extent = engine::Session::swap_extent(engine_config(f).value());
  return b;
}

void print_plan(const engine::Session& session, const gpu::Device& device,
                const planner::PlanBudgets& budgets,
                const std::optional<sched::Prediction>& prediction, int rank, int ranks) {
  const engine::ZeroStep& step = *session.zero();
  planner::PlanReport report =
      planner::make_plan_report(step, session.optimizer(), device, budgets);
  report.prediction = prediction;
  report.fit = with_flag_names(report.fit);
  if (rank != 0) return;
  std::printf("plan: ZeRO stage %d, %d rank%s; per rank (rank 0):\n%s", step.stage(), ranks,
              ranks > 1 ? "s" : "", report.table().c_str());
}

std::string StepTimes::versus(const std::optional<sched::Prediction>& prediction) const {
  if (!prediction || ms_.empty()) return "";
  const double measured = median(ms_);
  const double predicted = prediction->step_s * 1e3;
  char line[200];
  std::snprintf(line, sizeof(line),
                "plan: predicted step %.1f ms, measured %.1f ms (median of %zu steps), error "
                "%+.1f%%",
                predicted, measured, ms_.size(), 100.0 * (predicted - measured) / measured);
  return line;
}

}  // namespace strata::train_gpt
