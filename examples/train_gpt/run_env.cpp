#include "run_env.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "comm/comm.h"
#include "comm/mpi_comm.h"
#include "engine/checkpoint.h"
#include "nvme/swap_store.h"

namespace strata::train_gpt {

namespace {
// The cores one rank of this machine gets.
int core_share(const comm::Communicator& world) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, world.local_size()));
}
}  // namespace

Result<std::vector<std::string>> nvme_dirs_of(const Flags& f) {
  if (f.nvme_path.empty()) return std::vector<std::string>{};
  auto dirs = nvme::parse_nvme_paths(f.nvme_path);
  if (!dirs.ok()) return dirs.status().with_context("--nvme-path");
  for (const auto& d : *dirs) {
    if (!std::filesystem::is_directory(d)) {
      return make_error(ErrorCode::kConfig, "--nvme-path: '", d, "' is not a directory");
    }
  }
  return dirs;
}

Status make_checkpoint_dir(const Flags& f) {
  if (f.checkpoint_dir.empty()) return ok_status();
  std::error_code ec;
  std::filesystem::create_directories(f.checkpoint_dir, ec);
  if (!ec) return ok_status();
  return make_error(ErrorCode::kIo, "--checkpoint-dir ", f.checkpoint_dir,
                    ": cannot create: ", ec.message());
}

Status lock_checkpoint_dir(const Flags& f, bool lead, DirectoryLock& lock) {
  if (!lead || f.checkpoint_dir.empty() || f.checkpoint_every <= 0 || f.plan) return ok_status();
  STRATA_RETURN_IF_ERROR(lock.lock(f.checkpoint_dir, "--checkpoint-dir"));
  for (const std::string& p : engine::remove_incomplete_checkpoints(f.checkpoint_dir)) {
    std::printf("checkpoint: removed %s, left by a save that did not complete\n", p.c_str());
  }
  return ok_status();
}

Result<std::unique_ptr<comm::Communicator>> open_communicator(const Flags& f) {
  const bool use_mpi =
      f.comm_backend == "mpi" || (f.comm_backend == "auto" && comm::launched_by_mpirun());
  return comm::create_communicator(use_mpi ? comm::Backend::kMpi : comm::Backend::kLocal);
}

int host_threads_of(const Flags& f, const comm::Communicator& world) {
  if (f.host_threads > 0) return f.host_threads;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return world.size() > 1 ? core_share(world) : std::max(1, cores);
}

Result<Devices> open_devices(const Flags& f, const comm::Communicator& world) {
  auto kind = gpu::parse_device_kind(f.device);
  if (!kind.ok()) return kind.status().with_context("--device");
  gpu::DeviceOptions o;
  o.threads = f.device_threads > 0 ? f.device_threads : (world.size() > 1 ? core_share(world) : 0);
  o.memory_limit_bytes = f.gpu_memory_limit;
  // One GPU per rank (CudaDevice); ranks share GPUs round-robin when there are fewer.
  const int gpus = gpu::cuda_device_count();
  o.ordinal = gpus > 0 ? world.local_rank() % gpus : 0;
  // Ranks on one GPU divide its default pool (gpu/pool_size.h) instead of the first taking it.
  o.sharing = gpus > 0 ? (world.local_size() - o.ordinal + gpus - 1) / gpus : 1;
  auto dev = gpu::create_device(*kind, o);
  // --plan allocates nothing: a limit the real pool cannot reserve (a model far larger than
  // this machine) is planned against anyway, on a device with its default pool.
  size_t plan_limit = 0;
  if (f.plan && !dev.ok() && dev.status().code() == ErrorCode::kOutOfMemory) {
    plan_limit = f.gpu_memory_limit;
    o.memory_limit_bytes = 0;
    dev = gpu::create_device(*kind, o);
  }
  if (!dev.ok()) return dev.status();
  Devices d;
  d.real = std::move(dev).value();
  // --plan: the model and the engine lay themselves out on a device that only accounts, with an
  // optimizer that allocates nothing (engine/plan_report.h).
  if (f.plan) d.planning = std::make_unique<gpu::PlanningDevice>(*d.real, plan_limit);
  return d;
}

}  // namespace strata::train_gpt
