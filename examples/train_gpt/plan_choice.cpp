#include "plan_choice.h"

#include <cstdio>
#include <utility>

#include "auto_plan.h"
#include "config_fields.h"
#include "engine/config_exchange.h"
#include "planner/calibration.h"
#include "planner/choose.h"
#include "planner/session_prediction.h"
#include "planning.h"

namespace strata::train_gpt {

namespace {

std::string mib_or(uint64_t bytes, const char* none) {
  return bytes > 0 ? std::to_string(bytes >> 20) + " MiB" : std::string(none);
}

// Rank 0's part: the choice (or, with the order given, both orders' report) and its words.
Result<planner::Settings> lead_choice(const Flags& f, const planner::Settings& base,
                                      const planner::ModelPlanning& model,
                                      const planner::SearchContext& ctx, bool nvme) {
  const engine::EngineConfig& config = base.config;
  if (config.offload_auto) {
    std::printf("auto: planning the stage-3 settings against device %s, pinned host %s, NVMe %s\n",
                mib_or(ctx.real->memory_info().limit_bytes, "no limit").c_str(),
                mib_or(f.host_memory_limit, "no limit").c_str(),
                nvme ? (std::to_string(ctx.nvme_free >> 20) + " MiB").c_str() : "none");
  }
  if (planner::has_auto(config)) {
    const planner::Choice choice = planner::choose(base, nvme, model, ctx);
    if (choice.offload) {
      if (!choice.status.ok()) return refusal(*choice.offload, choice.status);
      std::printf("%s", explain(*choice.offload).c_str());
    }
    if (choice.order) {
      const bool layer =
          choice.settings.config.schedule.microbatch_order == engine::MicrobatchOrder::kLayer;
      std::printf("%s", order_line(*choice.order, layer, true).c_str());
    }
    if (choice.collectives) std::printf("%s", collectives_line(*choice.collectives).c_str());
    return choice.settings;
  }
  // The order given: both orders' predictions reported (--plan).
  engine::EngineConfig layer = config;
  layer.schedule.microbatch_order = engine::MicrobatchOrder::kLayer;
  std::printf(
      "%s",
      order_line(planner::search_order(layer, model, ctx), config.layer_major(), false).c_str());
  return base;
}

}  // namespace

Status resolve_auto(const Flags& f, engine::EngineConfig& config, gpu::Device& real,
                    const ModelSpec& spec, model::RunShape& shape, comm::Communicator& comm,
                    const std::vector<std::string>& nvme_dirs, int host_threads,
                    comm::Communicator* device_comm) {
  engine::EngineConfig layer = config;
  layer.schedule.microbatch_order = engine::MicrobatchOrder::kLayer;
  const bool report = f.plan && !planner::has_auto(config) && planner::layer_order_possible(layer);
  if (!planner::has_auto(config) && !report) return ok_status();
  const planner::Settings base{config, shape.checkpoint_interval};
  const planner::ModelPlanning model = model_planning(spec, shape);
  planner::SearchContext ctx;
  ctx.real = &real;
  ctx.comm = &comm;
  ctx.host_threads = host_threads;
  if (!planner::needs_rates(config) && !report) {  // resolved without planning, on every rank
    const planner::Choice choice = planner::choose(base, !nvme_dirs.empty(), model, ctx);
    STRATA_RETURN_IF_ERROR(choice.status);
    config = choice.settings.config;
    return ok_status();
  }
  const bool lead = comm.rank() == 0;
  planner::CalibrationRequest rq =
      planner::calibration_request(config, spec.probe(), shape, real, comm, host_threads);
  rq.redo = f.calibrate;
  rq.nvme_dirs = nvme_dirs;  // NVMe is a choice when there is a path
  rq.device_comm = device_comm;
  auto cal = planner::calibrate(rq);
  // Rank 0's choice, broadcast: [chosen, checkpoint interval], then its engine config.
  float chosen[2] = {};
  planner::Settings pick = base;
  Status st = cal.status();
  if (lead && !cal.ok() && !config.offload_auto) {
    // The order falls back to micro-batch-major, the collectives to the host.
    std::printf(
        "plan: micro-batch order micro, collectives host (no prediction to choose by: "
        "%s)\n",
        with_flag_names(cal.status()).to_string().c_str());
    if (config.schedule.microbatch_order == engine::MicrobatchOrder::kAuto) {
      pick.config.schedule.microbatch_order = engine::MicrobatchOrder::kMicro;
    }
    if (config.zero.collectives == engine::Collectives::kAuto) {
      pick.config.zero.collectives = engine::Collectives::kHost;
    }
    st = ok_status();
  } else if (lead && cal.ok()) {
    ctx.nvme_free = plan_budgets(f, shape.seq, comm.size(), nvme_dirs).nvme_free;
    ctx.rates = cal->rates;
    auto c = lead_choice(f, base, model, ctx, !nvme_dirs.empty());
    st = c.status();
    if (c.ok()) pick = std::move(c).value();
  }
  if (lead && st.ok()) {
    chosen[0] = 1.0f;
    chosen[1] = static_cast<float>(pick.checkpoint_interval);
  }
  if (comm.size() > 1) STRATA_RETURN_IF_ERROR(comm.broadcast(chosen, 2, DType::kF32, 0));
  if (chosen[0] != 1.0f) {
    return st.ok() ? make_error(ErrorCode::kInternal, "the planner's choice: rank 0 chose nothing")
                   : st;
  }
  STRATA_RETURN_IF_ERROR(engine::broadcast_config(pick.config, comm, 0));
  std::vector<std::string> own_paths = std::move(config.storage.nvme_paths);  // node-local drives
  config = std::move(pick.config);
  config.storage.nvme_paths = std::move(own_paths);
  shape.checkpoint_interval = static_cast<int64_t>(chosen[1]);
  return ok_status();
}

}  // namespace strata::train_gpt
