// gather_text: every rank's string at one rank, in rank order, for what rank 0 prints or writes
// for all (train_gpt's placement lines, the ranks' traces joined into one file). Collective.
//
// The lengths are all-gathered first (as raw 32-bit values: an all-gather copies, it does not
// add), then each string travels in a slot as long as the longest, padded with zero bytes, so a
// string of any length (a many-directory placement line, a trace of megabytes) arrives whole.
// The strings must not contain zero bytes.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace strata::comm {

// At `root`: size() strings, rank r's at [r]. Elsewhere: empty.
Result<std::vector<std::string>> gather_text(Communicator& comm, const std::string& mine,
                                             int root = 0);

}  // namespace strata::comm
