// LocalComm: the one-rank communicator. Every collective is a copy (or nothing) done at once in
// the calling thread; all byte counts are zero (the textbook formulas give 0 for one rank).
// Buffers are host memory (or CpuDevice memory, which is host memory).
// Thread safety: as Communicator (one thread at a time).
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace strata::comm {

std::unique_ptr<Communicator> create_local_comm(CommOptions options = CommOptions::from_env());

}  // namespace strata::comm
