// Whether a directory is the same directory for every rank: what checkpoints need (every rank
// writes its files into the save's directory and rank 0 reads their checksums there), and what
// ranks on machines of their own do not have unless the directory is on a filesystem every
// machine sees.
//
// Thread safety: none needed. Collective: every rank calls it, and every rank gets the verdict.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "core/status.h"

namespace strata::engine {

// Rank 0 makes a small file in `dir` (an existing directory), every rank looks for it, rank 0
// removes it. kConfig naming the directory and the ranks that do not see it; kIo when rank 0
// cannot make it.
Status check_shared_directory(const std::string& dir, comm::Communicator& comm);

}  // namespace strata::engine
