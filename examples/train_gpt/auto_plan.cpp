#include "auto_plan.h"

#include <cstdio>
#include <sstream>

#include "config_fields.h"
#include "engine/config_exchange.h"
#include "planner/calibration.h"
#include "planner/session_prediction.h"
#include "planning.h"

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
     << config.param_gpu_fraction << " --gpu-optimizer-fraction " << config.gpu_optimizer_fraction
     << " --offload-optimizer " << home_name(config.offload_optimizer);
  if (config.offload_optimizer == engine::Home::kNvme) {
    os << " --optimizer-nvme-fraction " << config.optimizer_nvme_fraction;
  }
  os << " --offload-activations " << home_name(config.offload_activations)
     << " --checkpoint-interval " << s.checkpoint_interval << " --prefetch-depth "
     << config.prefetch_depth;
  if (config.grad_accum > 1) {
    os << " --microbatch-order " << engine::microbatch_order_name(config.microbatch_order);
  }
  return os.str();
}

namespace {

// The search's answer, or why there is none.
Result<planner::Settings> chosen(const planner::OffloadSearch& r) {
  if (r.best >= 0) return r.candidates[size_t(r.best)].settings;
  if (r.candidates.empty()) {
    return r.first_error.with_context("--auto: no setting could be planned");
  }
  // The refusal of the setting that needs the least memory.
  const planner::Candidate* least = &r.candidates.front();
  for (const planner::Candidate& c : r.candidates) {
    if (c.device_peak + c.pinned_peak < least->device_peak + least->pinned_peak) least = &c;
  }
  return make_error(ErrorCode::kOutOfMemory, "--auto: none of the ", r.candidates.size(),
                    " settings fits the budgets; the one that needs the least memory (",
                    settings_flags(least->settings), "): ", least->fit.message());
}

}  // namespace

Status run_auto(const Flags& f, engine::EngineConfig& config, gpu::Device& real,
                const ModelSpec& spec, model::RunShape& shape, comm::Communicator& comm,
                const std::vector<std::string>& nvme_dirs, int host_threads) {
  const bool lead = comm.rank() == 0;
  planner::CalibrationRequest rq =
      planner::calibration_request(config, spec.probe(), shape, real, comm, host_threads);
  rq.redo = f.calibrate;
  rq.nvme_dirs = nvme_dirs;  // NVMe is a choice when there is a path
  auto cal = planner::calibrate(rq);
  // Rank 0's choice, broadcast: [ok, checkpoint interval], then its engine config.
  float choice[2] = {};
  planner::Settings pick;
  Status st = cal.status();
  if (lead && cal.ok()) {
    const planner::PlanBudgets budgets = plan_budgets(f, shape.seq, comm.size(), nvme_dirs);
    std::printf(
        "auto: planning the stage-3 settings against device %s, pinned host %s, NVMe "
        "%s\n",
        real.memory_info().limit_bytes > 0
            ? (std::to_string(real.memory_info().limit_bytes >> 20) + " MiB").c_str()
            : "no limit",
        f.host_memory_limit > 0 ? (std::to_string(f.host_memory_limit >> 20) + " MiB").c_str()
                                : "no limit",
        nvme_dirs.empty() ? "none" : (std::to_string(budgets.nvme_free >> 20) + " MiB").c_str());
    planner::SearchContext ctx;
    ctx.real = &real;
    ctx.comm = &comm;
    ctx.nvme_free = budgets.nvme_free;
    ctx.host_threads = host_threads;
    ctx.rates = cal->rates;
    const planner::OffloadSearch r =
        planner::search_offload(config, !nvme_dirs.empty(), model_planning(spec, shape), ctx);
    auto c = chosen(r);
    st = c.status();
    if (c.ok()) {
      std::printf("%s", explain(r).c_str());
      pick = *c;
      choice[0] = 1.0f;
      choice[1] = static_cast<float>(pick.checkpoint_interval);
    }
  }
  if (comm.size() > 1) STRATA_RETURN_IF_ERROR(comm.broadcast(choice, 2, DType::kF32, 0));
  if (choice[0] != 1.0f) {
    return st.ok() ? make_error(ErrorCode::kInternal, "--auto: rank 0 chose nothing") : st;
  }
  STRATA_RETURN_IF_ERROR(engine::broadcast_config(pick.config, comm, 0));
  config = pick.config;
  shape.checkpoint_interval = static_cast<int64_t>(choice[1]);
  return ok_status();
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
