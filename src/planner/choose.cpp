#include "planner/choose.h"

#include <utility>

namespace strata::planner {

using engine::Collectives;
using engine::MicrobatchOrder;

namespace {
bool order_to_plan(const engine::EngineConfig& c) {
  engine::EngineConfig layer = c;
  layer.schedule.microbatch_order = MicrobatchOrder::kLayer;
  return c.schedule.microbatch_order == MicrobatchOrder::kAuto && !c.schedule.device_grad_sum &&
         layer_order_possible(layer);
}

bool collectives_to_plan(const engine::EngineConfig& c, const SearchContext& ctx) {
  return c.zero.collectives == Collectives::kAuto && c.planned() && ctx.comm != nullptr &&
         ctx.comm->size() > 1;
}

// The offload settings and the micro-batch order (choose(), the collectives aside).
Choice choose_offload_and_order(const Settings& base, bool nvme, const ModelPlanning& model,
                                const SearchContext& ctx);
}  // namespace

bool has_auto(const engine::EngineConfig& c) {
  return c.offload_auto || c.schedule.microbatch_order == MicrobatchOrder::kAuto ||
         c.zero.collectives == Collectives::kAuto;
}

bool needs_rates(const engine::EngineConfig& c) {
  return c.offload_auto || order_to_plan(c) || c.zero.collectives == Collectives::kAuto;
}

Choice choose(const Settings& base, bool nvme, const ModelPlanning& model,
              const SearchContext& ctx) {
  // The other choices with the collectives on the host, then the collectives with them.
  Settings host = base;
  const bool collectives_auto = base.config.zero.collectives == Collectives::kAuto;
  if (collectives_auto) host.config.zero.collectives = Collectives::kHost;
  Choice choice = choose_offload_and_order(host, nvme, model, ctx);
  if (!collectives_auto || !choice.status.ok() || !collectives_to_plan(base.config, ctx)) {
    return choice;
  }
  choice.collectives = search_collectives(choice.settings, model, ctx);
  if (choice.collectives->device_faster) {
    choice.settings.config.zero.collectives = Collectives::kDevice;
  }
  return choice;
}

namespace {
Choice choose_offload_and_order(const Settings& base, bool nvme, const ModelPlanning& model,
                                const SearchContext& ctx) {
  Choice choice;
  choice.settings = base;
  engine::EngineConfig& config = choice.settings.config;
  if (config.offload_auto) {
    config.offload_auto = false;
    OffloadSearch r = search_offload(config, nvme, model, ctx);
    if (r.best >= 0) {
      choice.settings = r.candidates[size_t(r.best)].settings;
    } else if (r.candidates.empty()) {
      choice.status = r.first_error;
    } else {
      choice.status = make_error(ErrorCode::kOutOfMemory, "none of the ", r.candidates.size(),
                                 " settings fits the budgets");
    }
    choice.offload = std::move(r);
    return choice;
  }
  if (config.schedule.microbatch_order != MicrobatchOrder::kAuto) return choice;
  if (!order_to_plan(config)) {
    config.schedule.microbatch_order =
        config.schedule.device_grad_sum ? MicrobatchOrder::kLayer : MicrobatchOrder::kMicro;
    return choice;
  }
  engine::EngineConfig layer = config;
  layer.schedule.microbatch_order = MicrobatchOrder::kLayer;
  choice.order = search_order(layer, model, ctx);
  config.schedule.microbatch_order =
      choice.order->layer_faster ? MicrobatchOrder::kLayer : MicrobatchOrder::kMicro;
  return choice;
}

}  // namespace

}  // namespace strata::planner
