#include "auto_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <tuple>

#include "config_fields.h"
#include "engine/config_exchange.h"
#include "engine/offloaded_optimizer.h"
#include "engine/session.h"
#include "gpu/planning_device.h"
#include "model/gpt.h"
#include "planner/session_prediction.h"
#include "planning.h"

namespace strata::train_gpt {

std::string AutoSettings::flags() const {
  using engine::home_name;
  std::ostringstream os;
  os << "--offload-param " << home_name(config.param_home()) << " --param-gpu-fraction "
     << config.param_gpu_fraction << " --gpu-optimizer-fraction " << config.gpu_optimizer_fraction
     << " --offload-optimizer " << home_name(config.offload_optimizer);
  if (config.offload_optimizer == engine::Home::kNvme) {
    os << " --optimizer-nvme-fraction " << config.optimizer_nvme_fraction;
  }
  os << " --offload-activations " << home_name(config.offload_activations)
     << " --checkpoint-interval " << checkpoint_interval << " --prefetch-depth "
     << config.prefetch_depth;
  if (config.grad_accum > 1)
    os << " --microbatch-order " << (config.layer_major ? "layer" : "micro");
  return os.str();
}

void AutoSettings::apply(Flags& f) const {
  using engine::home_name;
  f.offload_param = home_name(config.param_home());
  f.param_gpu_fraction = config.param_gpu_fraction;
  f.gpu_optimizer_fraction = config.gpu_optimizer_fraction;
  f.offload_optimizer = home_name(config.offload_optimizer);
  f.nvme_fraction = config.optimizer_nvme_fraction;
  f.offload_activations = home_name(config.offload_activations);
  f.checkpoint_interval = checkpoint_interval;
  f.prefetch_depth = config.prefetch_depth;
  f.microbatch_order = config.layer_major ? "layer" : "micro";
}

bool layer_order_possible(const engine::EngineConfig& c) {
  return c.grad_accum > 1 && c.planned() && !c.delayed_update();
}

namespace {

std::vector<AutoSettings> candidates(const engine::EngineConfig& base, bool nvme, int64_t layers) {
  const int64_t root = std::clamp<int64_t>(std::llround(std::sqrt(double(layers))), 1,
                                           std::max<int64_t>(1, layers - 1));
  using engine::Home;
  std::vector<Home> homes{Home::kPinned};
  std::vector<double> nvme_fractions{0.0};
  std::vector<std::pair<Home, int64_t>> acts{{Home::kDevice, 0}};
  if (layers >= 2) {
    acts.push_back({Home::kDevice, root});
    acts.push_back({Home::kPinned, root});
  }
  if (nvme) {
    homes.push_back(Home::kNvme);
    nvme_fractions.push_back(0.5);
    nvme_fractions.push_back(1.0);
    if (layers >= 2) acts.push_back({Home::kNvme, root});
  }
  std::vector<AutoSettings> out;
  for (const Home home : homes) {
    for (double pf : {0.0, 0.5, 1.0}) {
      if (home == Home::kNvme && pf == 1.0) continue;  // every shard on the device: as cpu
      for (double gf : {0.0, 0.5}) {
        for (double nf : nvme_fractions) {
          if (gf + nf > 1.0) continue;
          for (const auto& [act, k] : acts) {
            for (int depth : {1, 2}) {
              if (pf == 1.0 && depth == 1) continue;  // nothing to prefetch
              AutoSettings s;
              s.config = base;
              s.config.offload_param = home;
              s.config.param_gpu_fraction = pf;
              s.config.gpu_optimizer_fraction = gf;
              s.config.offload_optimizer = nf > 0.0 ? Home::kNvme : Home::kPinned;
              s.config.optimizer_nvme_fraction = nf;
              s.config.offload_activations = act;
              s.config.prefetch_depth = depth;
              s.checkpoint_interval = k;
              // The micro-batches' order, where both are possible (the same results); with
              // --device-grad-sum only the segment-major one.
              s.config.layer_major = base.device_grad_sum;
              if (!base.device_grad_sum) out.push_back(s);
              if (layer_order_possible(s.config)) {
                s.config.layer_major = true;
                out.push_back(s);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace

// One candidate, planned only: its budget check and its predicted step.
Result<AutoCandidate> plan_candidate(const AutoSettings& s, gpu::Device& real,
                                     const ModelSpec& spec, model::RunShape shape,
                                     comm::Communicator& comm, uint64_t nvme_free, int host_threads,
                                     const sched::Rates& rates) {
  const engine::EngineConfig& config = s.config;
  gpu::PlanningDevice device(real);
  STRATA_ASSIGN_OR_RETURN(engine::Partitioning parts,
                          engine::Session::partition(config, spec.block_numels(), comm.size()));
  shape.checkpoint_interval = s.checkpoint_interval;
  STRATA_ASSIGN_OR_RETURN(
      auto model,
      spec.create(device, shape, engine::Session::block_storage(config, parts), false, 0));
  engine::SessionInputs inputs;
  inputs.plan_only = true;
  inputs.host_threads = host_threads;
  STRATA_ASSIGN_OR_RETURN(auto session,
                          engine::Session::create(config, device, comm, *model, inputs));
  AutoCandidate c;
  c.settings = s;
  c.fit = session->zero()->fit();
  const planner::PlanReport r =
      planner::make_plan_report(*session->zero(), session->optimizer(), device, {});
  c.device_peak = r.peak[int(planner::ReportTier::kDevice)];
  c.pinned_peak = r.peak[int(planner::ReportTier::kPinned)];
  if (c.fit.ok() && nvme_free > 0) {
    if (r.peak[int(planner::ReportTier::kNvme)] > nvme_free) {
      c.fit = make_error(ErrorCode::kOutOfMemory, "NVMe: needs ",
                         r.peak[int(planner::ReportTier::kNvme)], " bytes, ", nvme_free, " free");
    }
  }
  STRATA_ASSIGN_OR_RETURN(c.prediction, planner::predict(*session, rates));
  return c;
}

Result<AutoResult> choose_auto(const Flags& f, gpu::Device& real, const ModelSpec& spec,
                               const model::RunShape& shape, comm::Communicator& comm, bool nvme,
                               uint64_t nvme_free, int host_threads, const sched::Rates& rates) {
  AutoResult r;
  Status first_error;
  STRATA_ASSIGN_OR_RETURN(const engine::EngineConfig base, engine_config(f));
  for (const AutoSettings& s : candidates(base, nvme, spec.layers())) {
    auto c = plan_candidate(s, real, spec, shape, comm, nvme_free, host_threads, rates);
    if (!c.ok()) {  // a combination the engine refuses: not a candidate
      if (first_error.ok()) first_error = c.status();
      continue;
    }
    r.candidates.push_back(std::move(c).value());
  }
  std::vector<int> fit;
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    if (r.candidates[i].fit.ok()) fit.push_back(int(i));
  }
  std::stable_sort(fit.begin(), fit.end(), [&](int a, int b) {
    return r.candidates[size_t(a)].prediction.step_s < r.candidates[size_t(b)].prediction.step_s;
  });
  if (fit.empty()) {
    if (r.candidates.empty()) {
      return first_error.with_context("--auto: no setting could be planned");
    }
    // The refusal of the setting that needs the least memory.
    const AutoCandidate* least = &r.candidates.front();
    for (const AutoCandidate& c : r.candidates) {
      if (c.device_peak + c.pinned_peak < least->device_peak + least->pinned_peak) least = &c;
    }
    return make_error(ErrorCode::kOutOfMemory, "--auto: none of the ", r.candidates.size(),
                      " settings fits the budgets; the one that needs the least memory (",
                      least->settings.flags(), "): ", least->fit.message());
  }
  const auto& cs = r.candidates;
  auto step = [&](int i) { return cs[size_t(i)].prediction.step_s; };
  // Within 1% of the fastest (the prediction cannot tell them apart), the one that moves the
  // fewest bytes over NVMe, then over the link, then takes the least device memory.
  auto key = [&](int i) {
    const double* w = cs[size_t(i)].prediction.work;
    using sched::Work;
    return std::make_tuple(w[int(Work::kNvmeReadBytes)] + w[int(Work::kNvmeWriteBytes)],
                           w[int(Work::kH2DBytes)] + w[int(Work::kD2HBytes)],
                           cs[size_t(i)].device_peak);
  };
  r.best = fit[0];
  for (int i : fit) {
    if (step(i) > 1.01 * step(fit[0])) break;
    if (key(i) < key(r.best)) r.best = i;
  }
  for (int i : fit) {
    if (i == r.best) continue;
    if (std::fabs(step(i) - step(r.best)) <= 1e-3 * step(r.best)) {
      ++r.ties;
    } else if (r.runner_up < 0) {
      r.runner_up = i;
    }
  }
  return r;
}

Status run_auto(Flags& f, gpu::Device& real, const ModelSpec& spec, model::RunShape& shape,
                comm::Communicator& comm, const std::vector<std::string>& nvme_dirs,
                int host_threads) {
  const bool lead = comm.rank() == 0;
  planner::CalibrationRequest rq = planner::calibration_request(
      engine_config(f).value(), spec.probe(), shape, real, comm, host_threads);
  rq.redo = f.calibrate;
  rq.nvme_dirs = nvme_dirs;  // NVMe is a choice when there is a path
  auto cal = planner::calibrate(rq);
  // Rank 0's choice, broadcast: [ok, checkpoint interval], then its engine config.
  float choice[2] = {};
  AutoSettings chosen;
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
    auto r = choose_auto(f, real, spec, shape, comm, !nvme_dirs.empty(), budgets.nvme_free,
                         host_threads, cal->rates);
    st = r.status();
    if (r.ok()) {
      std::printf("%s", r->explain().c_str());
      chosen = r->candidates[size_t(r->best)].settings;
      choice[0] = 1.0f;
      choice[1] = static_cast<float>(chosen.checkpoint_interval);
    }
  }
  if (comm.size() > 1) STRATA_RETURN_IF_ERROR(comm.broadcast(choice, 2, DType::kF32, 0));
  if (choice[0] != 1.0f) {
    return st.ok() ? make_error(ErrorCode::kInternal, "--auto: rank 0 chose nothing") : st;
  }
  STRATA_RETURN_IF_ERROR(engine::broadcast_config(chosen.config, comm, 0));
  chosen.checkpoint_interval = static_cast<int64_t>(choice[1]);
  chosen.apply(f);
  shape.checkpoint_interval = chosen.checkpoint_interval;
  return ok_status();
}

std::string AutoResult::explain() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  int fitting = 0;
  for (const AutoCandidate& c : candidates) fitting += c.fit.ok() ? 1 : 0;
  const AutoCandidate& b = candidates[size_t(best)];
  os << "auto: " << fitting << " of " << candidates.size() << " settings fit the budgets; chose "
     << b.settings.flags() << "\n  " << b.prediction.describe() << ", device peak "
     << (b.device_peak >> 20) << " MiB, pinned " << (b.pinned_peak >> 20) << " MiB";
  if (ties > 0) os << " (" << ties << " other settings plan alike)";
  os << "\n";
  if (runner_up < 0) {
    os << "  no runner-up: no other setting fits\n";
    return os.str();
  }
  const AutoCandidate& u = candidates[size_t(runner_up)];
  const double slower = 100.0 * (u.prediction.step_s / b.prediction.step_s - 1.0);
  os << "  runner-up " << u.settings.flags() << "\n  " << u.prediction.describe()
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
