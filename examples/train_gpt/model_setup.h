// train_gpt's model: its family and shape from --model (a preset), the shape flags, the data's
// needs, --init-from (an llm.c GPT-2 file, or a Hugging Face Llama directory) or the checkpoint
// of --resume (whose parameters are read as --init-from's), and the run shape (B, T, the
// checkpoint interval). Every refusal names the flag and the value.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "data.h"
#include "ds_config.h"
#include "engine/engine_config.h"
#include "engine/session.h"
#include "flags.h"
#include "gpu/device.h"
#include "model/config.h"
#include "model/model.h"
#include "model_spec.h"

namespace strata::train_gpt {

struct ModelSetup {
  ModelSpec spec;  // the family and its shape
  model::RunShape shape;
  // Elements [r.begin, r.end) of block b's values from --init-from or the checkpoint (fp32);
  // empty when the run starts from the initialisation. A Llama's are read from their files when
  // asked for (one block in memory at a time; at stage 3 a rank reads only its own elements); a
  // GPT's llm.c file is read whole at setup.
  engine::ZeroStep::ParamSource initial;
  std::string resume_dir;     // the checkpoint --resume found
  bool restart_data = false;  // --resume-override changed the data: read it from its start
};

// Fills the shape flags from the preset and from the config's model-dependent keys.
Result<ModelSetup> setup_model(Flags& f, const CLI::App& app, const DataSource& source,
                               const ConfigDeferred& deferred);

// The model on `dev`, holding the blocks `storage` names, initialised (--seed, then the initial
// values where held; nothing under --plan). One that does not fit says what the run has not
// tried (out_of_memory_advice).
Result<std::unique_ptr<model::Model>> build_model(const Flags& f, const ModelSetup& setup,
                                                  gpu::Device& dev,
                                                  const model::BlockStorage& storage,
                                                  const engine::EngineConfig& config);

// What the engine's session takes from the run: the masters start from the initial values (or
// the initialisation, model/init.h, also of blocks not on the device); resuming, the exact fp32
// masters and moments of the checkpoint (the 16-bit parameters are their rounding).
engine::SessionInputs session_inputs(const Flags& f, const ModelSetup& setup, int rank,
                                     int host_threads);

}  // namespace strata::train_gpt
