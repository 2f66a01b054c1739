// --auto (the planner, docs/planner.md): the stage-3 settings that fit the budgets
// (--gpu-memory-limit, --host-memory-limit, the free space under --nvme-path) and minimise the
// predicted step time. Every candidate is a plan-only build of the step (nothing allocated:
// gpu::PlanningDevice, a plan-only optimizer) checked against the budgets and simulated with the
// machine's rates (engine/calibration.h).
//
// Candidates: --offload-param cpu (and nvme with --nvme-path), --param-gpu-fraction 0, 0.5, 1,
// --gpu-optimizer-fraction 0, 0.5, --optimizer-nvme-fraction 0 (and 0.5, 1 with --nvme-path),
// --offload-activations none with --checkpoint-interval 0 or about √L, cpu (and nvme) with √L,
// --prefetch-depth 1, 2 (only where parameters are offloaded); with --grad-accum > 1 each with
// --microbatch-order micro and, where it is possible (the planned schedule, no delayed update),
// layer (the same results; with --device-grad-sum only layer). --auto never changes the results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "engine/engine_config.h"
#include "flags.h"
#include "gpu/device.h"
#include "model/config.h"
#include "model_spec.h"
#include "scheduler/cost_model.h"

namespace strata::train_gpt {

// A candidate: the run's engine settings with the planner's choices in them (offload_param,
// param_gpu_fraction, gpu_optimizer_fraction, the optimizer's NVMe share, offload_activations,
// prefetch_depth), and the checkpoint interval (the model's run shape).
struct AutoSettings {
  engine::EngineConfig config;
  int64_t checkpoint_interval = 0;
  std::string flags() const;   // the choices as train_gpt flags
  void apply(Flags& f) const;  // the choices into the flags
};

struct AutoCandidate {
  AutoSettings settings;
  Status fit;  // the budget check
  sched::Prediction prediction;
  uint64_t device_peak = 0, pinned_peak = 0;
};

struct AutoResult {
  std::vector<AutoCandidate> candidates;  // every one that planned, fitting or not
  // The fastest that fits (of those within 1% of the fastest, which the prediction cannot tell
  // apart: the fewest NVMe bytes per step, then link bytes, then device memory), and the fastest
  // of the rest whose plan differs (another predicted time); ties: the settings predicted within
  // 0.1% of the choice (plans that come out alike).
  int best = -1, runner_up = -1, ties = 0;
  // The choice, the runner-up and why (the lanes whose busy or waiting time differ most).
  std::string explain() const;
};

// Whether the segment-major order of the micro-batches is possible with `c` (several
// micro-batches, the planned schedule, no delayed update).
bool layer_order_possible(const engine::EngineConfig& c);

// One candidate, planned only (nothing allocated): its budget check, peaks and predicted step.
Result<AutoCandidate> plan_candidate(const AutoSettings& s, gpu::Device& real,
                                     const ModelSpec& spec, model::RunShape shape,
                                     comm::Communicator& comm, uint64_t nvme_free, int host_threads,
                                     const sched::Rates& rates);

// Every rank searches the same candidates (none collective); rank 0's rates decide, so the caller
// broadcasts its choice.
Result<AutoResult> choose_auto(const Flags& f, gpu::Device& real, const ModelSpec& spec,
                               const model::RunShape& shape, comm::Communicator& comm, bool nvme,
                               uint64_t nvme_free, int host_threads, const sched::Rates& rates);

// --auto in the trainer: calibrates, searches (rank 0), prints the choice, the runner-up and why,
// and applies rank 0's choice to `f` and `shape` on every rank (its EngineConfig and checkpoint
// interval broadcast: collective).
Status run_auto(Flags& f, gpu::Device& real, const ModelSpec& spec, model::RunShape& shape,
                comm::Communicator& comm, const std::vector<std::string>& nvme_dirs,
                int host_threads);

}  // namespace strata::train_gpt
