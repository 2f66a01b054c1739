// Helper of test_zero_fault: a ZeRO stage-3 job whose optimizer state is all on NVMe; after step
// 2, rank 1's swap store fails an I/O (EIO, the store's fault injection). The failing rank ends
// the job with Communicator::abort, as train_gpt does. Usage: zero_fault_helper SCRATCH_DIR.
// Exits 0 only if no step failed (which the test counts as a failure).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_comm.h"
#include "engine/zero_step.h"
#include "gpu/cpu_device.h"
#include "model/synthetic_task.h"
#include "nvme/swap_store.h"

using namespace strata;

namespace {
[[noreturn]] void stop(comm::Communicator* world, const Status& st) {
  if (world != nullptr) world->abort(st);
  std::fprintf(stderr, "zero_fault_helper: %s\n", st.to_string().c_str());
  std::exit(2);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: zero_fault_helper SCRATCH_DIR\n");
    return 2;
  }
  comm::CommOptions co;
  co.timeout_s = 60.0;
  auto world_r = comm::create_mpi_comm(co);
  if (!world_r.ok()) stop(nullptr, world_r.status());
  comm::Communicator& world = *world_r.value();
  gpu::DeviceOptions dopt;
  dopt.threads = 1;
  auto dev = gpu::create_cpu_device(dopt);
  if (!dev.ok()) stop(&world, dev.status());
  auto task = model::AdditionTask::create(2, 10).value();
  model::GptConfig cfg;
  cfg.vocab = model::AdditionTask::kVocab;
  cfg.max_seq = task.seq();
  cfg.layers = 2;
  cfg.heads = 2;
  cfg.channels = 32;
  auto m = model::GptModel::create(*dev.value(), cfg, model::RunShape{4, task.seq(), 0});
  if (!m.ok()) stop(&world, m.status());
  if (Status st = m.value()->init_params(1); !st.ok()) stop(&world, st);
  nvme::SwapStoreOptions so;
  so.dirs = {std::string(argv[1])};
  so.capacity_bytes = 32 << 20;
  auto store = nvme::SwapStore::open(so);
  if (!store.ok()) stop(&world, store.status());
  const int stage = 3;
  auto parts = engine::ZeroStep::partition(cfg, world.size(), 0);
  if (!parts.ok()) stop(&world, parts.status());
  engine::OffloadedOptimizerOptions oo;
  oo.nvme_fraction = 1.0;
  oo.store = store.value().get();
  oo.staging_slots = 1;
  auto opt = engine::OffloadedOptimizer::create(
      engine::ZeroStep::optimizer_numel(*m.value(), *parts, stage), cpu::CpuAdam({}), oo);
  if (!opt.ok()) stop(&world, opt.status());
  if (Status st =
          engine::ZeroStep::load_masters(*m.value(), opt.value(), *parts, stage, world.rank());
      !st.ok()) {
    stop(&world, st);
  }
  engine::ZeroStepOptions zo;
  zo.stage = stage;
  auto step = engine::ZeroStep::create(*m.value(), opt.value(), world, zo);
  if (!step.ok()) stop(&world, step.status());
  std::vector<int32_t> tokens(static_cast<size_t>(4 * task.seq())), targets(tokens.size());
  for (int64_t s = 1; s <= 10; ++s) {
    if (s == 3 && world.rank() == 1) {
      store.value()->set_fault_injection(nvme::FaultInjection{1, nvme::FaultKind::kEio});
    }
    task.make_batch(4, 5, static_cast<uint64_t>(world.rank()), s, tokens.data(), targets.data());
    auto r = step.value()->run(tokens.data(), targets.data(), s);
    if (!r.ok()) stop(&world, r.status());
  }
  std::printf("zero_fault_helper: rank %d: 10 steps without a failure\n", world.rank());
  return 0;
}
