// --metrics on resume: the records the interrupted run wrote after its checkpoint are dropped
// (the resumed run writes them again, with the same values), so that every step has one record.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata::train_gpt {

// Keeps the lines of `path` whose "step" is at most `last_step` (lines without one are kept),
// rewriting the file through a temporary one and a rename. A missing file is fine.
Status trim_metrics(const std::string& path, int64_t last_step);

}  // namespace strata::train_gpt
