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
#include "cpu/rank_placement.h"
#include "engine/engine_config.h"
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
// With several ranks that save: --checkpoint-dir is one directory for all of them (on machines
// of their own, a shared filesystem), refused otherwise naming the ranks that do not see it.
// Collective.
Status check_checkpoint_dir_shared(const Flags& f, comm::Communicator& world);
Result<std::unique_ptr<comm::Communicator>> open_communicator(const Flags& f);
// Where this rank runs (cpu/rank_placement.h): its GPU, cores and memory node chosen by --bind
// and --device-ids, the process bound to them, and one line per rank printed by rank 0 (every
// rank's line gathered in rank order). Collective.
Result<cpu::Placement> place_this_rank(const Flags& f, comm::Communicator& world,
                                       const std::vector<std::string>& nvme_dirs);
// --host-threads, or the rank's share of this machine's cores (its placement's).
int host_threads_of(const Flags& f, const cpu::Placement& placement);

// The rank's device, and for --plan the device that only accounts on top of it.
struct Devices {
  std::unique_ptr<gpu::Device> real;
  std::unique_ptr<gpu::PlanningDevice> planning;
  gpu::Device& dev() { return planning ? *planning : *real; }  // where the run lays itself out
};
// The rank's GPU and thread count are its placement's (--device-threads overrides the count).
Result<Devices> open_devices(const Flags& f, const cpu::Placement& placement);
// --comm: auto becomes the planner's choice in `config` (zero.collectives auto: resolve_auto
// prices both places) with several ranks under MPI on the CpuDevice, or on GPUs with NCCL built
// and a GPU for each rank;
// for the collectives on (or possibly on) a CUDA device it opens the NCCL communicator on the
// placement's GPU (null otherwise, and for --plan, which runs nothing). Collective.
Result<std::unique_ptr<comm::Communicator>> open_device_comm(const Flags& f,
                                                             engine::EngineConfig& config,
                                                             const gpu::Device& dev,
                                                             comm::Communicator& world,
                                                             const cpu::Placement& placement);

}  // namespace strata::train_gpt
