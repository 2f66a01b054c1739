// --auto (the planner's offload search, planner/search.h, docs/planner.md) in the trainer: the
// stage-3 settings that fit the budgets (--gpu-memory-limit, --host-memory-limit, the free space
// under --nvme-path) and minimise the predicted step time, chosen on rank 0 with its calibrated
// rates (planner/calibration.h) and taken by every rank. The trainer's part is the words: what it
// plans against, the choice, the runner-up and why, in its flags.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "engine/engine_config.h"
#include "flags.h"
#include "gpu/device.h"
#include "model/config.h"
#include "model_spec.h"
#include "planner/search.h"

namespace strata::train_gpt {

// The planner's view of the run's model (planner::ModelPlanning): its blocks and a plan-only
// copy of it at a run shape.
planner::ModelPlanning model_planning(const ModelSpec& spec, const model::RunShape& shape);

// A candidate's settings as train_gpt flags ("--offload-param cpu --param-gpu-fraction 0 ...").
std::string settings_flags(const planner::Settings& s);

// The search's choice, the runner-up and why (the lanes whose busy or waiting time differ most).
std::string explain(const planner::OffloadSearch& r);

// --auto: calibrates, searches (rank 0), prints the choice, the runner-up and why, and puts rank
// 0's choice into `config` and `shape` on every rank (its EngineConfig and checkpoint interval
// broadcast: collective).
Status run_auto(const Flags& f, engine::EngineConfig& config, gpu::Device& real,
                const ModelSpec& spec, model::RunShape& shape, comm::Communicator& comm,
                const std::vector<std::string>& nvme_dirs, int host_threads);

}  // namespace strata::train_gpt
