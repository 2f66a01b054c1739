// planner::choose: the one call that resolves every setting a front end leaves to the planner
// (docs/planner.md), given the run's config with its auto values, the model and what to plan
// against (search.h's SearchContext: the device, the communicator, the NVMe bytes free, the
// host threads and this machine's rates):
//   - EngineConfig::offload_auto: the offload settings and the checkpoint interval, searched
//     (search_offload; the micro-batch order with them where there are several micro-batches);
//   - EngineConfig::schedule.microbatch_order kAuto: both orders planned (search_order), the
//   segment-major
//     one taken when it is possible, fits and is predicted faster by more than 1%; with
//     device_grad_sum the segment-major one (the only one it has), without several micro-batches
//     (or with the delayed update, or the serial schedule) the micro-batch-major one;
//   - EngineConfig::zero.collectives kAuto: after the above, both places planned with the
//     settings chosen (search_collectives), the device taken when it fits and is predicted
//     faster; one rank or the serial schedule: the host (there is nothing to gather).
// It returns the config with those values resolved (a config a session accepts), and what the
// front end explains the choice by (the searches: the candidates, the choice, the runner-up and
// each one's prediction). The front end renders the explanation in its own words.
//
// Thread safety: none (one thread). Nothing here is collective: rank 0 chooses and the front end
// broadcasts its choice (engine/config_exchange.h).
#pragma once

#include <optional>

#include "core/status.h"
#include "engine/engine_config.h"
#include "planner/search.h"

namespace strata::planner {

struct Choice {
  Settings settings;                     // the base with every auto value resolved
  std::optional<OffloadSearch> offload;  // offload_auto: every candidate, best and runner-up
  std::optional<OrderSearch> order;      // microbatch_order auto, when both were planned
  std::optional<CollectivesSearch> collectives;  // zero.collectives auto, when both were planned
  // ok, or why there is no choice: kOutOfMemory when offload_auto finds no candidate that fits
  // (`offload` holds each one's refusal: the front end names the one needing the least memory);
  // the first candidate's planning error when none could be planned.
  Status status;
};

// Whether `c` leaves anything to choose.
bool has_auto(const engine::EngineConfig& c);
// Whether choosing for `c` plans candidates (and so needs ctx.rates): offload_auto, or an auto
// order where the segment-major one is possible and not forced.
bool needs_rates(const engine::EngineConfig& c);

// `base` with its auto values resolved (Choice::status says when there is none). `nvme`: NVMe
// homes are candidates (there is a directory for them).
Choice choose(const Settings& base, bool nvme, const ModelPlanning& model,
              const SearchContext& ctx);

}  // namespace strata::planner
