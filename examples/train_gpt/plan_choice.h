// What train_gpt leaves to the planner, resolved by one call (planner::choose, docs/planner.md)
// on rank 0 with its calibrated rates and taken by every rank: --auto (EngineConfig::offload_auto:
// the stage-3 offload settings and the checkpoint interval that fit the budgets, --gpu-memory-
// limit, --host-memory-limit and the free space under --nvme-path, and minimise the predicted
// step) and --microbatch-order auto (the default: with several micro-batches the segment-major
// order where it is possible, fits and is predicted faster; both give the same results). --plan
// prints both orders' predictions whatever the flag says.
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

namespace strata::train_gpt {

// `config` and `shape` (its checkpoint interval) with every auto value resolved. Collective:
// every rank calls it; rank 0 chooses and prints why; each rank keeps its own NVMe paths.
// `device_comm`: the device collectives' communicator, when one is open (its links are
// calibrated with it; else at the network's rates).
Status resolve_auto(const Flags& f, engine::EngineConfig& config, gpu::Device& real,
                    const ModelSpec& spec, model::RunShape& shape, comm::Communicator& comm,
                    const std::vector<std::string>& nvme_dirs, int host_threads,
                    comm::Communicator* device_comm);

}  // namespace strata::train_gpt
