// An EngineConfig as JSON (every field by its name, bit-exact for every value) and across ranks:
// what one rank decided (the planner's --auto choice on rank 0) becomes every rank's config.
//
// Thread safety: none needed; broadcast_config is collective (every rank calls it).
#pragma once

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/status.h"
#include "engine/engine_config.h"

namespace strata::engine {

nlohmann::json config_to_json(const EngineConfig& config);
// kCorrupt naming the field for a missing or mistyped one.
Result<EngineConfig> config_from_json(const nlohmann::json& j);

// Rank `root`'s config on every rank.
Status broadcast_config(EngineConfig& config, comm::Communicator& comm, int root);

}  // namespace strata::engine
