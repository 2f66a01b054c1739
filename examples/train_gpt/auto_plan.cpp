#include "auto_plan.h"

#include <cstdio>
#include <sstream>

#include "config_fields.h"
#include "planner/plan_report.h"

namespace strata::train_gpt {

planner::ModelPlanning model_planning(const ModelSpec& spec, const model::RunShape& shape) {
  planner::ModelPlanning m;
  m.block_numels = spec.block_numels();
  m.layers = spec.layers();
  m.shape = shape;
  m.create = [&spec](gpu::Device& device, const model::RunShape& s,
                     const model::BlockStorage& storage) {
    return spec.create(device, s, storage, false, 0);
  };
  return m;
}

std::string settings_flags(const planner::Settings& s) {
  using engine::home_name;
  const engine::EngineConfig& config = s.config;
  std::ostringstream os;
  os << "--offload-param " << home_name(config.param_home()) << " --param-gpu-fraction "
     << config.zero.param_gpu_fraction << " --gpu-optimizer-fraction "
     << config.optimizer.gpu_fraction << " --offload-optimizer "
     << home_name(config.optimizer.offload);
  if (config.optimizer.offload == engine::Home::kNvme) {
    os << " --optimizer-nvme-fraction " << config.optimizer.nvme_fraction;
  }
  os << " --offload-activations " << home_name(config.zero.offload_activations)
     << " --checkpoint-interval " << s.checkpoint_interval << " --prefetch-depth "
     << config.zero.prefetch_depth;
  if (config.schedule.grad_accum > 1) {
    os << " --microbatch-order " << engine::microbatch_order_name(config.schedule.microbatch_order);
  }
  return os.str();
}

Status refusal(const planner::OffloadSearch& r, const Status& why) {
  if (r.candidates.empty()) return why.with_context("--auto: no setting could be planned");
  // The refusal of the setting that needs the least memory.
  const planner::Candidate* least = &r.candidates.front();
  for (const planner::Candidate& c : r.candidates) {
    if (c.device_peak + c.pinned_peak < least->device_peak + least->pinned_peak) least = &c;
  }
  return make_error(ErrorCode::kOutOfMemory, "--auto: none of the ", r.candidates.size(),
                    " settings fits the budgets; the one that needs the least memory (",
                    settings_flags(least->settings), "): ", least->fit.message());
}

namespace {
// One of two planned candidates in words: its prediction and device peak, or its refusal.
std::string said(const planner::Candidate& planned, const Status& why) {
  if (!why.ok()) return "does not fit: " + with_flag_names(why).message();
  char line[160];
  std::snprintf(line, sizeof(line), "predicted %.1f ms a step, device peak %s",
                planned.prediction.step_s * 1e3, planner::human_bytes(planned.device_peak).c_str());
  return line;
}
}  // namespace

std::string order_line(const planner::OrderSearch& o, bool layer, bool decided) {
  return std::string("plan: micro-batch order ") + (layer ? "layer" : "micro") + " (" +
         (decided ? "the planner's choice: --microbatch-order auto" : "--microbatch-order") +
         "); micro: " + said(o.planned[0], o.why[0]) + "; layer: " + said(o.planned[1], o.why[1]) +
         "\n";
}

std::string collectives_line(const planner::CollectivesSearch& o) {
  const bool device = o.device_faster;
  return std::string("plan: collectives ") + (device ? "device" : "host") +
         " (the planner's choice: --comm auto); host: " + said(o.planned[0], o.why[0]) +
         "; device: " + said(o.planned[1], o.why[1]) + "\n";
}

std::string explain(const planner::OffloadSearch& r) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  int fitting = 0;
  for (const planner::Candidate& c : r.candidates) fitting += c.fit.ok() ? 1 : 0;
  const planner::Candidate& b = r.candidates[size_t(r.best)];
  os << "auto: " << fitting << " of " << r.candidates.size() << " settings fit the budgets; chose "
     << settings_flags(b.settings) << "\n  " << b.prediction.describe() << ", device peak "
     << (b.device_peak >> 20) << " MiB, pinned " << (b.pinned_peak >> 20) << " MiB";
  if (r.ties > 0) os << " (" << r.ties << " other settings plan alike)";
  os << "\n";
  if (r.runner_up < 0) {
    os << "  no runner-up: no other setting fits\n";
    return os.str();
  }
  const planner::Candidate& u = r.candidates[size_t(r.runner_up)];
  const double slower = 100.0 * (u.prediction.step_s / b.prediction.step_s - 1.0);
  os << "  runner-up " << settings_flags(u.settings) << "\n  " << u.prediction.describe()
     << ", device peak " << (u.device_peak >> 20) << " MiB, pinned " << (u.pinned_peak >> 20)
     << " MiB\n  why: ";
  if (slower < 1.0) {
    os << "predicted alike (within 1%, closer than the prediction can tell); the choice moves "
          "fewer bytes over NVMe and the link, or takes less device memory\n";
    return os.str();
  }
  os << "the runner-up is " << slower << "% slower";
  // The lane whose busy time grew most, and the waiting on transfers.
  int lane = 0;
  double grew = -1e30;
  for (int l = 0; l < sched::kNumLanes; ++l) {
    const double d = u.prediction.busy_s[l] - b.prediction.busy_s[l];
    if (d > grew) {
      grew = d;
      lane = l;
    }
  }
  const double waits = u.prediction.exposed_s - b.prediction.exposed_s;
  if (waits > grew && waits > 0.0) {
    os << ": its compute waits " << waits * 1e3 << " ms longer on transfers";
  } else if (grew > 0.0) {
    os << ": its " << sched::lane_name(static_cast<sched::Lane>(lane)) << " lane is busy "
       << grew * 1e3 << " ms longer";
  }
  os << "\n";
  return os.str();
}

}  // namespace strata::train_gpt
