#include "planner/search.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>
#include <utility>

#include "engine/session.h"
#include "gpu/planning_device.h"
#include "planner/plan_report.h"
#include "planner/session_prediction.h"

namespace strata::planner {

using engine::Home;

bool layer_order_possible(const engine::EngineConfig& c) {
  return c.schedule.grad_accum > 1 && c.planned() && !c.delayed_update();
}

namespace {

std::vector<Settings> offload_candidates(const engine::EngineConfig& base, bool nvme,
                                         int64_t layers) {
  const int64_t root = std::clamp<int64_t>(std::llround(std::sqrt(double(layers))), 1,
                                           std::max<int64_t>(1, layers - 1));
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
  using engine::MicrobatchOrder;
  std::vector<Settings> out;
  for (const Home home : homes) {
    for (double pf : {0.0, 0.5, 1.0}) {
      if (home == Home::kNvme && pf == 1.0) continue;  // every shard on the device: as cpu
      for (double gf : {0.0, 0.5}) {
        for (double nf : nvme_fractions) {
          if (gf + nf > 1.0) continue;
          for (const auto& [act, k] : acts) {
            for (int depth : {1, 2}) {
              if (pf == 1.0 && depth == 1) continue;  // nothing to prefetch
              Settings s;
              s.config = base;
              s.config.zero.offload_param = home;
              s.config.zero.param_gpu_fraction = pf;
              s.config.optimizer.gpu_fraction = gf;
              s.config.optimizer.offload = nf > 0.0 ? Home::kNvme : Home::kPinned;
              s.config.optimizer.nvme_fraction = nf;
              s.config.zero.offload_activations = act;
              s.config.zero.prefetch_depth = depth;
              s.checkpoint_interval = k;
              // The micro-batches' order, where both are possible (the same results); with
              // device_grad_sum only the segment-major one.
              s.config.schedule.microbatch_order =
                  base.schedule.device_grad_sum ? MicrobatchOrder::kLayer : MicrobatchOrder::kMicro;
              if (!base.schedule.device_grad_sum) out.push_back(s);
              if (layer_order_possible(s.config)) {
                s.config.schedule.microbatch_order = MicrobatchOrder::kLayer;
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

Result<Candidate> plan_candidate(const Settings& s, const ModelPlanning& model,
                                 const SearchContext& ctx) {
  const engine::EngineConfig& config = s.config;
  gpu::PlanningDevice device(*ctx.real);
  STRATA_ASSIGN_OR_RETURN(const engine::SessionLayout layout,
                          engine::Session::prepare(config, model.block_numels, ctx.comm->size()));
  model::RunShape shape = model.shape;
  shape.checkpoint_interval = s.checkpoint_interval;
  STRATA_ASSIGN_OR_RETURN(auto m, model.create(device, shape, layout.storage));
  engine::SessionInputs inputs;
  inputs.plan_only = true;
  inputs.host_threads = ctx.host_threads;
  STRATA_ASSIGN_OR_RETURN(auto session,
                          engine::Session::create(config, device, *ctx.comm, *m, inputs));
  Candidate c;
  c.settings = s;
  c.fit = session->zero()->fit();
  const PlanReport r = make_plan_report(*session->zero(), session->optimizer(), device, {});
  c.device_peak = r.peak[int(ReportTier::kDevice)];
  c.pinned_peak = r.peak[int(ReportTier::kPinned)];
  if (c.fit.ok() && ctx.nvme_free > 0) {
    if (r.peak[int(ReportTier::kNvme)] > ctx.nvme_free) {
      c.fit = make_error(ErrorCode::kOutOfMemory, "NVMe: needs ", r.peak[int(ReportTier::kNvme)],
                         " bytes, ", ctx.nvme_free, " free");
    }
  }
  STRATA_ASSIGN_OR_RETURN(c.prediction, predict(*session, ctx.rates));
  return c;
}

OffloadSearch search_offload(const engine::EngineConfig& base, bool nvme,
                             const ModelPlanning& model, const SearchContext& ctx) {
  OffloadSearch r;
  for (const Settings& s : offload_candidates(base, nvme, model.layers)) {
    auto c = plan_candidate(s, model, ctx);
    if (!c.ok()) {  // a combination the engine refuses: not a candidate
      if (r.first_error.ok()) r.first_error = c.status();
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
  if (fit.empty()) return r;
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

namespace {
// Two candidates of `base`, variant k made by set(config, k): each one's plan (planned[k]) and its
// plan or budget refusal (why[k]; ok: it fits).
void plan_two(const Settings& base, const ModelPlanning& model, const SearchContext& ctx,
              const std::function<void(engine::EngineConfig&, int)>& set, Candidate (&planned)[2],
              Status (&why)[2]) {
  for (int k = 0; k < 2; ++k) {
    Settings s = base;
    set(s.config, k);
    auto r = plan_candidate(s, model, ctx);
    why[k] = r.ok() ? r->fit : r.status();
    if (r.ok()) planned[k] = std::move(r).value();
  }
}
}  // namespace

OrderSearch search_order(const engine::EngineConfig& config, const ModelPlanning& model,
                         const SearchContext& ctx) {
  OrderSearch o;
  plan_two(
      Settings{config, model.shape.checkpoint_interval}, model, ctx,
      [](engine::EngineConfig& c, int k) {
        c.schedule.microbatch_order =
            k == 1 ? engine::MicrobatchOrder::kLayer : engine::MicrobatchOrder::kMicro;
      },
      o.planned, o.why);
  o.layer_faster = o.why[1].ok() && (!o.why[0].ok() || o.planned[1].prediction.step_s <
                                                           0.99 * o.planned[0].prediction.step_s);
  return o;
}

CollectivesSearch search_collectives(const Settings& settings, const ModelPlanning& model,
                                     const SearchContext& ctx) {
  CollectivesSearch o;
  plan_two(
      settings, model, ctx,
      [](engine::EngineConfig& c, int k) {
        c.zero.collectives = k == 1 ? engine::Collectives::kDevice : engine::Collectives::kHost;
      },
      o.planned, o.why);
  o.device_faster = o.why[1].ok() && (!o.why[0].ok() || o.planned[1].prediction.step_s <
                                                            o.planned[0].prediction.step_s);
  return o;
}

}  // namespace strata::planner
