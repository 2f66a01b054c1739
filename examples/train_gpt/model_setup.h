// train_gpt's model: its shape from --model (a preset), the shape flags, the data's needs,
// --init-from or the checkpoint of --resume (whose parameters are read as --init-from's), and
// the run shape (B, T, the checkpoint interval). Every refusal names the flag and the value.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "data.h"
#include "ds_config.h"
#include "flags.h"
#include "model/config.h"

namespace strata::train_gpt {

struct ModelSetup {
  model::GptConfig cfg;
  model::RunShape shape;
  std::vector<std::vector<float>> initial;  // by block: the values of --init-from / the checkpoint
  std::string resume_dir;                   // the checkpoint --resume found
  bool restart_data = false;  // --resume-override changed the data: read it from its start
};

// Fills the shape flags from the preset and from the config's model-dependent keys.
Result<ModelSetup> setup_model(Flags& f, const CLI::App& app, const DataSource& source,
                               const ConfigDeferred& deferred);

}  // namespace strata::train_gpt
