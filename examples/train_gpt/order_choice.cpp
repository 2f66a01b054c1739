#include "order_choice.h"

#include <cstdio>

#include "auto_plan.h"
#include "config_fields.h"
#include "engine/session.h"
#include "planner/calibration.h"
#include "planner/plan_report.h"
#include "planner/session_prediction.h"
#include "planning.h"

namespace strata::train_gpt {

Status choose_microbatch_order(Flags& f, gpu::Device& real, const ModelSpec& spec,
                               const model::RunShape& shape, comm::Communicator& comm,
                               const std::vector<std::string>& nvme_dirs, int host_threads) {
  const bool decide = f.microbatch_order == "auto";
  if (!decide && !f.plan) return ok_status();
  // --device-grad-sum needs the segment-major order (EngineConfig::validate says so otherwise).
  if (decide && f.device_grad_sum) {
    f.microbatch_order = "layer";
    return ok_status();
  }
  STRATA_ASSIGN_OR_RETURN(engine::EngineConfig config, engine_config(f));
  config.layer_major = true;
  if (!layer_order_possible(config)) {
    if (decide) f.microbatch_order = "micro";
    return ok_status();
  }
  const bool lead = comm.rank() == 0;
  planner::CalibrationRequest rq =
      planner::calibration_request(config, spec.probe(), shape, real, comm, host_threads);
  rq.redo = f.calibrate;
  rq.nvme_dirs = nvme_dirs;
  auto cal = planner::calibrate(rq);
  float layer = 0.0f;  // rank 0's choice: 1 for the segment-major order
  if (lead && !cal.ok()) {
    std::printf("plan: micro-batch order micro (no prediction to choose by: %s)\n",
                with_flag_names(cal.status()).to_string().c_str());
  }
  if (lead && cal.ok()) {
    const uint64_t nvme_free = plan_budgets(f, shape.seq, comm.size(), nvme_dirs).nvme_free;
    AutoCandidate c[2];  // [0] micro, [1] layer
    Status why[2];
    for (int o = 0; o < 2; ++o) {
      AutoSettings s;
      s.config = config;
      s.config.layer_major = o == 1;
      s.checkpoint_interval = shape.checkpoint_interval;
      auto r = plan_candidate(s, real, spec, shape, comm, nvme_free, host_threads, cal->rates);
      why[o] = r.ok() ? r->fit : r.status();
      if (r.ok()) c[o] = std::move(r).value();
    }
    auto said = [&](int o) {
      char line[160];
      if (why[o].ok()) {
        std::snprintf(line, sizeof(line), "predicted %.1f ms a step, device peak %s",
                      c[o].prediction.step_s * 1e3, planner::human_bytes(c[o].device_peak).c_str());
        return std::string(line);
      }
      return "does not fit: " + with_flag_names(why[o]).message();
    };
    const bool faster =
        why[1].ok() && (!why[0].ok() || c[1].prediction.step_s < 0.99 * c[0].prediction.step_s);
    layer = (decide ? faster : f.microbatch_order == "layer") ? 1.0f : 0.0f;
    std::printf("plan: micro-batch order %s (%s); micro: %s; layer: %s\n",
                layer == 1.0f ? "layer" : "micro",
                decide ? "the planner's choice: --microbatch-order auto" : "--microbatch-order",
                said(0).c_str(), said(1).c_str());
  }
  if (comm.size() > 1) STRATA_RETURN_IF_ERROR(comm.broadcast(&layer, 1, DType::kF32, 0));
  if (decide) f.microbatch_order = layer == 1.0f ? "layer" : "micro";
  return ok_status();
}

}  // namespace strata::train_gpt
