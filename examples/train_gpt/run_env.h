// What a run needs before its engine: the --nvme-path directories (each checked), the
// checkpoint directory made, the communicator (MPI under mpirun or with --comm-backend mpi, else
// one local rank), the host threads each rank gets, and the device (--device, one GPU per rank,
// the planning device of --plan). Every refusal names the flag.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/file_identity.h"
#include "core/status.h"
#include "flags.h"
#include "gpu/device.h"
#include "gpu/planning_device.h"

namespace strata::train_gpt {

// --nvme-path's directories, each an existing directory.
Result<std::vector<std::string>> nvme_dirs_of(const Flags& f);
// --checkpoint-dir created when given.
Status make_checkpoint_dir(const Flags& f);
// One run writes a checkpoint directory at a time: rank 0 (`lead`) of a run that saves holds a
// lock on it (flock on the directory itself, so that no file is left; released by any exit),
// then removes what saves that did not complete left there, saying so.
Status lock_checkpoint_dir(const Flags& f, bool lead, DirectoryLock& lock);
Result<std::unique_ptr<comm::Communicator>> open_communicator(const Flags& f);
// --host-threads, or the rank's share of this machine's cores (all of them for one rank).
int host_threads_of(const Flags& f, const comm::Communicator& world);

// The rank's device, and for --plan the device that only accounts on top of it.
struct Devices {
  std::unique_ptr<gpu::Device> real;
  std::unique_ptr<gpu::PlanningDevice> planning;
  gpu::Device& dev() { return planning ? *planning : *real; }  // where the run lays itself out
};
Result<Devices> open_devices(const Flags& f, const comm::Communicator& world);

}  // namespace strata::train_gpt
