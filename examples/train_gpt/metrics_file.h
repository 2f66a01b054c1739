// --metrics: one JSON object per line (rank 0), flushed as it goes. On resume the records the
// interrupted run wrote after its checkpoint are dropped (the resumed run writes them again,
// with the same values), so that every step has one record.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace strata::train_gpt {

// Keeps the lines of `path` whose "step" is at most `last_step` (lines without one are kept),
// rewriting the file (a link's target) through a temporary one and a rename; returns how many
// were dropped. A missing file, or one that is not a regular file, is left as it is.
Result<int64_t> trim_metrics(const std::string& path, int64_t last_step);
// The line that says so.
void say_trimmed(const std::string& path, int64_t last_step, int64_t dropped);

class MetricsFile {
 public:
  // Opens `path` (nothing with an empty path): a fresh run truncates it; a run resumed after
  // `resumed_step` adds to it, less the records of the steps it is about to train again.
  Status open(const std::string& path, bool resuming, int64_t resumed_step);
  void write(const nlohmann::json& record) {
    if (out_.is_open()) out_ << record.dump() << std::endl;
  }

 private:
  std::ofstream out_;
};

}  // namespace strata::train_gpt
