#include "order_choice.h"

#include <cstdio>

#include "auto_plan.h"
#include "config_fields.h"
#include "planner/calibration.h"
#include "planner/plan_report.h"
#include "planner/search.h"
#include "planner/session_prediction.h"
#include "planning.h"

namespace strata::train_gpt {

Status choose_microbatch_order(const Flags& f, engine::EngineConfig& config, gpu::Device& real,
                               const ModelSpec& spec, const model::RunShape& shape,
                               comm::Communicator& comm, const std::vector<std::string>& nvme_dirs,
                               int host_threads) {
  using engine::MicrobatchOrder;
  const bool decide = config.microbatch_order == MicrobatchOrder::kAuto;
  if (!decide && !f.plan) return ok_status();
  // --device-grad-sum needs the segment-major order (EngineConfig::validate says so otherwise).
  if (decide && config.device_grad_sum) {
    config.microbatch_order = MicrobatchOrder::kLayer;
    return ok_status();
  }
  engine::EngineConfig layer = config;
  layer.microbatch_order = MicrobatchOrder::kLayer;
  if (!planner::layer_order_possible(layer)) {
    if (decide) config.microbatch_order = MicrobatchOrder::kMicro;
    return ok_status();
  }
  const bool lead = comm.rank() == 0;
  planner::CalibrationRequest rq =
      planner::calibration_request(layer, spec.probe(), shape, real, comm, host_threads);
  rq.redo = f.calibrate;
  rq.nvme_dirs = nvme_dirs;
  auto cal = planner::calibrate(rq);
  float pick = 0.0f;  // rank 0's choice: 1 for the segment-major order
  if (lead && !cal.ok()) {
    std::printf("plan: micro-batch order micro (no prediction to choose by: %s)\n",
                with_flag_names(cal.status()).to_string().c_str());
  }
  if (lead && cal.ok()) {
    planner::SearchContext ctx;
    ctx.real = &real;
    ctx.comm = &comm;
    ctx.nvme_free = plan_budgets(f, shape.seq, comm.size(), nvme_dirs).nvme_free;
    ctx.host_threads = host_threads;
    ctx.rates = cal->rates;
    const planner::OrderSearch o = planner::search_order(layer, model_planning(spec, shape), ctx);
    auto said = [&](int k) {
      char line[160];
      if (o.why[k].ok()) {
        std::snprintf(line, sizeof(line), "predicted %.1f ms a step, device peak %s",
                      o.planned[k].prediction.step_s * 1e3,
                      planner::human_bytes(o.planned[k].device_peak).c_str());
        return std::string(line);
      }
      return "does not fit: " + with_flag_names(o.why[k]).message();
    };
    pick = (decide ? o.layer_faster : config.microbatch_order == MicrobatchOrder::kLayer) ? 1.0f
                                                                                          : 0.0f;
    std::printf("plan: micro-batch order %s (%s); micro: %s; layer: %s\n",
                pick == 1.0f ? "layer" : "micro",
                decide ? "the planner's choice: --microbatch-order auto" : "--microbatch-order",
                said(0).c_str(), said(1).c_str());
  }
  if (comm.size() > 1) STRATA_RETURN_IF_ERROR(comm.broadcast(&pick, 1, DType::kF32, 0));
  if (decide)
    config.microbatch_order = pick == 1.0f ? MicrobatchOrder::kLayer : MicrobatchOrder::kMicro;
  return ok_status();
}

}  // namespace strata::train_gpt
