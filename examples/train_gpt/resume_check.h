// --resume is exact or refused: a checkpoint records the run it belongs to (run_record: the
// seed, the batch, the accumulation, the sequence length and the data); a resumed run takes
// those it was not given and refuses, naming each difference, those given otherwise. The model's
// shape comes from the checkpoint and is never overridden; --resume-override lets the run flags
// differ (each difference said in one line, the data then read from its start).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "data.h"
#include "engine/checkpoint.h"
#include "flags.h"
#include "model/config.h"
#include "model_setup.h"
#include "model_spec.h"

namespace strata::train_gpt {

// What a checkpoint records of the run (the manifest's extra.run). `seq`: T.
nlohmann::json run_record(const Flags& f, int64_t seq);

// Checks `f` against the checkpoint in `dir` (its parameters' shape `saved`), filling in the
// run flags that were not given. Returns whether the data must start over (--resume-override
// changed what it reads); kConfig naming every difference otherwise.
Result<bool> check_resume(Flags& f, const CLI::App& app, const DataSource& source,
                          const std::string& dir, const ModelSpec& saved);

// The checkpoint to resume (setup.resume_dir; nothing without one): its manifest against this
// run (ranks, stage, model), this rank's files' checksums, and the data loader put back where
// it was (unless the data starts over). Errors name --resume.
Result<engine::CheckpointInfo> open_resume(const ModelSetup& setup, int rank, int ranks, int stage,
                                           TrainData& data);

}  // namespace strata::train_gpt
