// Choosing and creating a communicator. registry.cpp is the one file of src/comm that knows
// whether the NCCL backend was built (DESIGN.md §2).
#pragma once

#include <memory>
#include <string_view>

#include "comm/communicator.h"

namespace strata::comm {

enum class Backend { kAuto, kLocal, kMpi, kNccl };

std::string_view backend_name(Backend backend);  // "auto", "local", "mpi", "nccl"
// Accepts auto, local, mpi, nccl.
Result<Backend> parse_backend(std::string_view name);

// Whether the NCCL backend was compiled in.
bool nccl_built();

// kAuto: NCCL when built and this machine has a GPU for each of its ranks, else MPI when started
// by mpirun, else local.
// kNccl without an NCCL build is kUnsupported. device_ordinal is for NCCL (-1: local rank % GPUs).
Result<std::unique_ptr<Communicator>> create_communicator(
    Backend backend, CommOptions options = CommOptions::from_env(), int device_ordinal = -1);

}  // namespace strata::comm
