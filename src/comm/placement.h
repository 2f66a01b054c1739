// Placing this rank on the machine's cores: the communicator's local rank and local size (ranks
// sharing this machine, from MPI_Comm_split_type SHARED) fed to cpu::place_and_bind, which places
// it by train_gpt's rule (cpu/rank_placement.h, without a GPU) and binds the process (so CPU
// Adam's and CpuDevice's thread pools, created afterwards, stay on the rank's cores) and logs one
// line per rank. Call it at start-up, before creating thread pools. Use RankPlacement::threads()
// as the thread count (e.g. DeviceOptions::threads).
#pragma once

#include "comm/communicator.h"
#include "cpu/rank_placement.h"

namespace strata::comm {

Result<cpu::RankPlacement> place_rank(const Communicator& comm, bool bind = true);

}  // namespace strata::comm
