// train_gpt's files, checked before anything is opened for writing: no output is an input
// (by file identity: links and other spellings of a path included; a Llama's output directory
// is the set of files a save writes or removes there, each compared), no two outputs are one
// file, nothing is written inside the checkpoint --resume reads or a directory --init-from
// reads (checkpoints and swap files included), no input lies where this run writes checkpoints
// or swap files, and every output can be created now (its directory takes a new file, a model's
// bytes are free, a Llama's directory holds nothing but files where the save writes), so that a
// run never fails after training for an output it could not write. Every refusal is one line
// naming both flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "data.h"
#include "flags.h"
#include "model_spec.h"

namespace strata::train_gpt {

// `resume_dir`: the checkpoint --resume found (empty without); `nvme_dirs`: --nvme-path's;
// `spec`: the model, whose files' bytes must be free (a Llama's are directories). Also refuses a
// --checkpoint-dir that would save nothing (no --checkpoint-every, and not where --resume looked).
Status check_files(const Flags& f, const DataSource& source, const std::string& resume_dir,
                   const std::vector<std::string>& nvme_dirs, const ModelSpec& spec);

}  // namespace strata::train_gpt
