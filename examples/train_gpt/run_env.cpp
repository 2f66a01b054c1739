#include "run_env.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "comm/comm.h"
#include "comm/gather_text.h"
#include "comm/mpi_comm.h"
#include "config_fields.h"
#include "engine/checkpoint.h"
#include "engine/shared_directory.h"
#include "nvme/swap_store.h"

namespace strata::train_gpt {

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

Status check_checkpoint_dir_shared(const Flags& f, comm::Communicator& world) {
  if (f.checkpoint_dir.empty() || f.checkpoint_every <= 0 || f.plan) return ok_status();
  return engine::check_shared_directory(f.checkpoint_dir, world).with_context("--checkpoint-dir");
}

Result<std::unique_ptr<comm::Communicator>> open_communicator(const Flags& f) {
  const bool use_mpi =
      f.comm_backend == "mpi" || (f.comm_backend == "auto" && comm::launched_by_mpirun());
  return comm::create_communicator(use_mpi ? comm::Backend::kMpi : comm::Backend::kLocal);
}

Result<cpu::Placement> place_this_rank(const Flags& f, comm::Communicator& world,
                                       const std::vector<std::string>& nvme_dirs) {
  STRATA_ASSIGN_OR_RETURN(cpu::BindMode mode, cpu::parse_bind_mode(f.bind));
  STRATA_ASSIGN_OR_RETURN(cpu::Topology topo, cpu::Topology::discover());
  cpu::PlacementRequest rq;
  rq.world_rank = world.rank();
  rq.local_rank = world.local_rank();
  rq.local_size = world.local_size();
  rq.bind = mode;
  // The affinity the user or the launcher gave (taskset, mpirun's binding): auto keeps to it.
  if (std::vector<int> given = topo.given_cores();
      static_cast<int>(given.size()) < topo.num_cores()) {
    rq.given_cores = std::move(given);
  }
  auto kind = gpu::parse_device_kind(f.device);
  if (!kind.ok()) return kind.status().with_context("--device");
  if (*kind == gpu::DeviceKind::kCuda) {
    for (int i = 0; i < gpu::cuda_device_count(); ++i) {
      rq.gpu_nodes.push_back(cpu::numa_node_of_pci(gpu::cuda_pci_bus_id(i)));
    }
    rq.device_ids = f.device_ids;
  } else if (!f.device_ids.empty()) {
    return make_error(ErrorCode::kConfig, "--device-ids: given with --device ", f.device,
                      ", which runs on the CPU (use --device cuda)");
  }
  rq.drives = nvme_dirs;
  for (const std::string& d : nvme_dirs) rq.drive_nodes.push_back(cpu::numa_node_of_path(d));
  STRATA_ASSIGN_OR_RETURN(cpu::Placement p, cpu::place_local_rank(topo, rq));
  if (Status st = cpu::apply_placement(topo, p); !st.ok()) {
    p.bind = false;  // the OS refused: said on the rank's line, the run goes on unbound
    p.unbound_why = st.message();
  }
  // One line per rank, in rank order, printed by rank 0 (many --nvme-path directories make long
  // lines; gather_text carries any length).
  STRATA_ASSIGN_OR_RETURN(
      std::vector<std::string> lines,
      comm::gather_text(world, "placement " + with_placement_flags(p.describe(world.rank()))));
  for (const std::string& line : lines) std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  return p;
}

int host_threads_of(const Flags& f, const cpu::Placement& placement) {
  return f.host_threads > 0 ? f.host_threads : placement.threads();
}

Result<Devices> open_devices(const Flags& f, const cpu::Placement& placement) {
  auto kind = gpu::parse_device_kind(f.device);
  if (!kind.ok()) return kind.status().with_context("--device");
  gpu::DeviceOptions o;
  o.threads = f.device_threads > 0 ? f.device_threads : placement.threads();
  o.memory_limit_bytes = f.gpu_memory_limit;
  // The placement's GPU; ranks on one GPU divide its default pool (gpu/pool_size.h) instead of
  // the first taking it.
  o.ordinal = std::max(0, placement.gpu);
  o.sharing = placement.gpu_ranks;
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
  // optimizer that allocates nothing (planner/plan_report.h).
  if (f.plan) d.planning = std::make_unique<gpu::PlanningDevice>(*d.real, plan_limit);
  return d;
}

Result<std::unique_ptr<comm::Communicator>> open_device_comm(const Flags& f,
                                                             engine::EngineConfig& config,
                                                             const gpu::Device& dev,
                                                             comm::Communicator& world,
                                                             const cpu::Placement& placement) {
  const bool cuda = dev.kind() == gpu::DeviceKind::kCuda;
  const bool mpi = world.backend() == "mpi";
  // NCCL takes one rank a GPU: whether any rank shares its GPU (agreed, so that every rank
  // decides alike; starting NCCL is collective).
  float shared = cuda && placement.gpu_ranks > 1 ? 1.0f : 0.0f;
  if (cuda && mpi && world.size() > 1) {
    STRATA_RETURN_IF_ERROR(
        world.all_reduce(&shared, &shared, 1, DType::kF32, comm::ReduceOp::kMax));
  }
  // auto: the planner prices both places where a device communicator can exist (NCCL on GPUs,
  // one rank each; the CpuDevice's device memory is host memory: MPI).
  if (f.comm == "auto" && config.planned() && mpi && world.size() > 1 &&
      (!cuda || (comm::nccl_built() && shared == 0.0f))) {
    config.zero.collectives = engine::Collectives::kAuto;
  }
  if (f.comm == "nccl" && !cuda) {
    return make_error(ErrorCode::kConfig,
                      "--comm nccl needs a GPU (--device cuda; this run's "
                      "device is ",
                      dev.name(), ", whose collectives are MPI's: --comm mpi)");
  }
  if (f.comm == "nccl" && shared != 0.0f) {
    return make_error(ErrorCode::kConfig,
                      "--comm nccl needs a GPU for each rank (NCCL refuses two ranks on one GPU; "
                      "here ranks share a GPU: --device-ids, or --comm mpi)");
  }
  if (config.zero.collectives == engine::Collectives::kHost || !cuda || f.plan) {
    return std::unique_ptr<comm::Communicator>();
  }
  if (!comm::nccl_built()) {
    return make_error(ErrorCode::kUnsupported,
                      "--comm nccl: this build has no NCCL (configure with -DSTRATA_NCCL=ON)");
  }
  if (!mpi) {
    return make_error(ErrorCode::kConfig,
                      "--comm nccl needs the ranks of mpirun (NCCL starts through MPI); use "
                      "--comm mpi for one local rank");
  }
  auto nccl = comm::create_communicator(comm::Backend::kNccl, comm::CommOptions::from_env(),
                                        std::max(0, placement.gpu));
  if (!nccl.ok()) return nccl.status().with_context("--comm nccl");
  return std::move(nccl).value();
}

}  // namespace strata::train_gpt
