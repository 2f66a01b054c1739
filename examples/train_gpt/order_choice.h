// --microbatch-order auto (the default): with several micro-batches, the planner's choice of
// their order (planner/search.h, docs/zero.md#the-order-of-the-micro-batches): both orders
// planned (nothing allocated), the segment-major one taken when it is possible (the planned
// schedule, no delayed update), fits the budgets and is predicted faster. Both give the same
// results, so the choice changes only the speed and the memory. --plan prints both predictions
// whatever the flag says.
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

// Resolves config.microbatch_order kAuto to kMicro or kLayer (rank 0's choice, broadcast; a line
// on rank 0 says what and why when there is a choice), and with --plan prints both orders'
// predictions. Collective (the calibration): every rank calls it.
Status choose_microbatch_order(const Flags& f, engine::EngineConfig& config, gpu::Device& real,
                               const ModelSpec& spec, const model::RunShape& shape,
                               comm::Communicator& comm, const std::vector<std::string>& nvme_dirs,
                               int host_threads);

}  // namespace strata::train_gpt
