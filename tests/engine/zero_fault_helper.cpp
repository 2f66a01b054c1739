// Helper of test_zero_fault: a ZeRO stage-3 job whose optimizer state is all on NVMe; after step
// 2, rank 1's swap store fails an I/O (EIO, the store's fault injection). The failing rank ends
// the job with Communicator::abort, as train_gpt does. Usage: zero_fault_helper SCRATCH_DIR.
// Exits 0 only if no step failed (which the test counts as a failure).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_comm.h"
#include "engine/session.h"
#include "gpu/cpu_device.h"
#include "model/gpt.h"
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
  // Stage 3, the optimizer state all on NVMe in argv[1] (the session's own swap store).
  engine::EngineConfig config;
  config.zero.stage = 3;
  config.precision = cfg.dtype;
  config.optimizer.offload = engine::Home::kNvme;
  config.optimizer.nvme_fraction = 1.0;
  config.storage.nvme_paths = {std::string(argv[1])};
  auto session = engine::Session::create(config, *dev.value(), world, *m.value(), {});
  if (!session.ok()) stop(&world, session.status());
  nvme::SwapStore* store = session.value()->store();
  engine::TrainStep& step = session.value()->step();
  std::vector<int32_t> tokens(static_cast<size_t>(4 * task.seq())), targets(tokens.size());
  for (int64_t s = 1; s <= 10; ++s) {
    if (s == 3 && world.rank() == 1) {
      store->set_fault_injection(nvme::FaultInjection{1, nvme::FaultKind::kEio});
    }
    task.make_batch(4, 5, static_cast<uint64_t>(world.rank()), s, tokens.data(), targets.data());
    auto r = step.run(tokens.data(), targets.data(), s, 1);
    if (!r.ok()) stop(&world, r.status());
  }
  std::printf("zero_fault_helper: rank %d: 10 steps without a failure\n", world.rank());
  return 0;
}
