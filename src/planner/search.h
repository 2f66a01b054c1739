// The planner's search (docs/planner.md): the settings a front end leaves to it, resolved by
// planning candidates (nothing allocated: a gpu::PlanningDevice and a plan-only session, so
// every candidate's plan is built, checked against the budgets and simulated with this machine's
// rates) and taking the fastest that fits. Two searches:
//   - the offload settings (--auto): offload_param cpu (and nvme where there is an NVMe path),
//     param_gpu_fraction 0, 0.5, 1, gpu_optimizer_fraction 0, 0.5, optimizer_nvme_fraction 0
//     (and 0.5, 1 with NVMe), offload_activations none with checkpoint interval 0 or about √L,
//     cpu (and nvme) with √L, prefetch_depth 1, 2 (only where parameters are offloaded); with
//     several micro-batches each in the micro-batch-major order and, where possible, the
//     segment-major one (with device_grad_sum only that). The choice never changes the results.
//   - the micro-batch order (microbatch_order auto): both orders planned, the segment-major one
//     taken when it is possible, fits and is predicted faster (by more than 1%).
//   - where the collectives run (zero.collectives auto): both planned, the device taken when it
//     fits and is predicted faster (or the host does not fit).
// The front end says what it asks and renders the answer in its own words (train_gpt: its flags).
//
// Thread safety: none (one thread); nothing here is collective: each rank may search, and the
// front end broadcasts rank 0's choice.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "engine/engine_config.h"
#include "gpu/device.h"
#include "model/config.h"
#include "model/model.h"
#include "scheduler/cost_model.h"

namespace strata::planner {

// The run's model as the search plans it: its blocks, layers and run shape, and how to make a
// plan-only copy of it (on a planning device, with a run shape and the storage a session names).
struct ModelPlanning {
  std::vector<int64_t> block_numels;
  int64_t layers = 0;
  model::RunShape shape;
  std::function<Result<std::unique_ptr<model::Model>>(
      gpu::Device& device, const model::RunShape& shape, const model::BlockStorage& storage)>
      create;
};

// What the search plans against besides the config's own limits (gpu_memory_limit,
// host_memory_limit): this machine's device, the communicator of the run, the free bytes under
// the NVMe paths (0: no check) and the host threads a session gets.
struct SearchContext {
  gpu::Device* real = nullptr;
  comm::Communicator* comm = nullptr;
  uint64_t nvme_free = 0;
  int host_threads = 1;
  sched::Rates rates;
};

// A candidate: engine settings and the model's checkpoint interval.
struct Settings {
  engine::EngineConfig config;
  int64_t checkpoint_interval = 0;
};

struct Candidate {
  Settings settings;
  Status fit;  // the budget check (and the NVMe space)
  sched::Prediction prediction;
  uint64_t device_peak = 0, pinned_peak = 0;
};

// Whether the segment-major order is possible with `c` (several micro-batches, the planned
// schedule, no delayed update).
bool layer_order_possible(const engine::EngineConfig& c);

// One candidate, planned only: its budget check, peaks and predicted step.
Result<Candidate> plan_candidate(const Settings& s, const ModelPlanning& model,
                                 const SearchContext& ctx);

struct OffloadSearch {
  std::vector<Candidate> candidates;  // every one that planned, fitting or not
  Status first_error;                 // of the first that could not be planned
  // The fastest that fits (of those within 1% of the fastest, which the prediction cannot tell
  // apart: the fewest NVMe bytes per step, then link bytes, then device memory), and the fastest
  // of the rest whose plan differs (another predicted time); ties: the settings predicted within
  // 0.1% of the choice (plans that come out alike). -1: none fits (or none).
  int best = -1, runner_up = -1, ties = 0;
};

// The offload settings of `base` (its other settings kept): every candidate planned.
OffloadSearch search_offload(const engine::EngineConfig& base, bool nvme,
                             const ModelPlanning& model, const SearchContext& ctx);

struct OrderSearch {
  Candidate planned[2];       // [0] micro-batch-major, [1] segment-major
  Status why[2];              // each one's plan or budget refusal (ok: it fits)
  bool layer_faster = false;  // [1] fits and is predicted faster by more than 1%
};

struct CollectivesSearch {
  Candidate planned[2];        // [0] on the host, [1] on the device
  Status why[2];               // each one's plan or budget refusal (ok: it fits)
  bool device_faster = false;  // [1] fits and is predicted faster, or [0] does not fit
};

// Both places of the collectives of `settings` (its other settings kept).
CollectivesSearch search_collectives(const Settings& settings, const ModelPlanning& model,
                                     const SearchContext& ctx);

// Both micro-batch orders of `config` (layer_order_possible(config) with kLayer).
OrderSearch search_order(const engine::EngineConfig& config, const ModelPlanning& model,
                         const SearchContext& ctx);

}  // namespace strata::planner
