#include "planning.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>

#include "config_fields.h"
#include "engine/session.h"
#include "model/gpt.h"

namespace strata::train_gpt {

engine::CalibrationRequest calibration_request(
    const Flags& f, gpu::Device& real, const model::GptConfig& cfg, const model::RunShape& shape,
    comm::Communicator& comm, const std::vector<std::string>& nvme_dirs, int host_threads) {
  engine::CalibrationRequest rq;
  rq.device = &real;
  rq.probe = model::GptModel::probe(cfg);
  rq.shape = shape;
  rq.comm = &comm;
  rq.host_threads = host_threads;
  rq.redo = f.calibrate;
  const bool nvme =
      f.offload_optimizer == "nvme" || f.offload_param == "nvme" || f.offload_activations == "nvme";
  if (nvme) rq.nvme_dirs = nvme_dirs;
  rq.nvme_block_bytes = f.nvme_block_size;
  rq.nvme_queue_depth = static_cast<uint32_t>(f.nvme_queue_depth);
  return rq;
}

std::optional<sched::Prediction> predict(const engine::ZeroStep& step,
                                         const engine::CalibrationRequest& request, const Flags& f,
                                         bool lead) {
  auto cal = engine::calibrate(request);
  if (!cal.ok()) {
    if (lead)
      std::printf("plan: no prediction: %s\n", with_flag_names(cal.status()).to_string().c_str());
    return std::nullopt;
  }
  if (lead && cal->measured > 0) {
    std::printf("plan: calibrated %d rates of this machine (%s):\n%s", cal->measured,
                cal->cache_path.c_str(), cal->describe().c_str());
  }
  auto p = step.predict(cal->rates, static_cast<int>(f.grad_accum));
  if (!p.ok()) {
    if (lead)
      std::printf("plan: no prediction: %s\n", with_flag_names(p.status()).to_string().c_str());
    return std::nullopt;
  }
  return *p;
}

engine::PlanBudgets plan_budgets(const Flags& f, int64_t seq, int ranks,
                                 const std::vector<std::string>& nvme_dirs) {
  engine::PlanBudgets b;
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

void print_plan(const engine::ZeroStep& step, const engine::OffloadedOptimizer& optimizer,
                const gpu::Device& device, const engine::PlanBudgets& budgets,
                const std::optional<sched::Prediction>& prediction, int rank, int ranks) {
  engine::PlanReport report = engine::make_plan_report(step, optimizer, device, budgets);
  report.prediction = prediction;
  report.fit = with_flag_names(report.fit);
  if (rank != 0) return;
  std::printf("plan: ZeRO stage %d, %d rank%s; per rank (rank 0):\n%s", step.stage(), ranks,
              ranks > 1 ? "s" : "", report.table().c_str());
}

std::string StepTimes::versus(const std::optional<sched::Prediction>& prediction) const {
  if (!prediction || ms_.empty()) return "";
  std::vector<double> v = ms_;
  std::sort(v.begin(), v.end());
  const double measured = v[v.size() / 2];
  const double predicted = prediction->step_s * 1e3;
  char line[200];
  std::snprintf(line, sizeof(line),
                "plan: predicted step %.1f ms, measured %.1f ms (median of %zu steps), error "
                "%+.1f%%",
                predicted, measured, v.size(), 100.0 * (predicted - measured) / measured);
  return line;
}

}  // namespace strata::train_gpt
