// The one table between the engine's settings and train_gpt's two vocabularies: each
// engine::Field with its flag and its DeepSpeed key (ds_config.h), so that the engine's messages
// (which name fields, engine/engine_config.h) reach the user in the words they gave; and the
// EngineConfig the flags describe.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/engine_config.h"
#include "flags.h"

namespace strata::train_gpt {

struct FieldNames {
  engine::Field field;
  std::string_view flag;    // "--zero-stage"
  std::string_view ds_key;  // "zero_optimization.stage"; empty where DeepSpeed has none
};
// Every field, in engine::Field order.
const FieldNames& field_names(engine::Field field);

// `st` with the engine's field references as flags; a flag a DeepSpeed config set (given to
// name_config_keys once, from Flags::config_keys) as its key and the flag:
// "zero_optimization.offload_optimizer.device (--offload-optimizer)".
Status with_flag_names(const Status& st);
// The placement's settings (cpu/rank_placement.h: `bind`, `device_ids`) as train_gpt's flags;
// with_flag_names renders them too.
std::string with_placement_flags(std::string text);
void name_config_keys(const std::map<std::string, std::string>& keys);

// The engine's settings from the flags (whose strings check_flags has accepted); kConfig naming
// --nvme-path for a bad directory list.
Result<engine::EngineConfig> engine_config(const Flags& f);

}  // namespace strata::train_gpt
