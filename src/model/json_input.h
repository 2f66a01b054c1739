// Reading a JSON input (config.json, a checkpoint index, a DeepSpeed config) as every JSON input
// is read: the file through core/input_file.h (a regular file, or a pipe where allowed, bounded
// in size, read with pread) and parsed with every object's keys unique (a duplicate key is
// refused naming it and its object: JSON leaves its meaning open, DeepSpeed refuses it). The
// includer links nlohmann_json. Free functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/input_file.h"
#include "core/status.h"

namespace strata::model {

// Errors begin with `what`: kCorrupt (not JSON, a duplicate key).
Result<nlohmann::json> parse_json_input(const std::string& text, const std::string& what);

// read_input_file, then parse_json_input.
Result<nlohmann::json> read_json_input(const std::string& path, const std::string& what,
                                       const InputRead& how = {});

// The bound on a configuration file's size (config.json, --config): 1 MiB, a hundred times the
// largest in use.
inline constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 20;

}  // namespace strata::model
