// A one-rank ZeRO step on the CpuDevice for the planner tests (test_planner, test_prediction):
// built plan-only (a PlanningDevice over the CpuDevice, a plan-only optimizer: nothing allocated)
// or for real, with the same configuration.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/local_comm.h"
#include "cpu/pinned_memory.h"
#include "engine/offloaded_optimizer.h"
#include "engine/session.h"
#include "gpu/cpu_device.h"
#include "gpu/planning_device.h"
#include "model/gpt.h"
#include "model/init.h"
#include "nvme/swap_store.h"
#include "planner/plan_report.h"
#include "scratch_dir.h"

namespace strata::engine::test {

struct PCase {
  std::string name;
  int stage = 0;
  double nvme_fraction = 0.0;
  Home offload_param = Home::kPinned;
  Home offload_activations = Home::kDevice;
  double gpu_fraction = 0.0;
  float grad_clip = 0.0f;
  int64_t layers = 4, channels = 64, batch = 4, seq = 32, checkpoint = 2;
  DType dtype = DType::kBF16;
  bool needs_store() const {
    return nvme_fraction > 0.0 || offload_param == Home::kNvme ||
           offload_activations == Home::kNvme;
  }
};

// Everything one step needs; members in construction order (destroyed in reverse).
struct Built {
  std::unique_ptr<gpu::Device> device;
  std::unique_ptr<gpu::PlanningDevice> planning;
  std::unique_ptr<comm::Communicator> comm;
  std::unique_ptr<model::GptModel> model;
  std::unique_ptr<Session> session;
  OffloadedOptimizer* optimizer = nullptr;  // the session's
  ZeroStep* step = nullptr;                 // the session's
  std::vector<int32_t> tokens, targets;
  gpu::Device& dev() { return planning ? *planning : *device; }
};

inline model::GptConfig config_of(const PCase& c) {
  model::GptConfig cfg;
  cfg.vocab = 96;
  cfg.max_seq = c.seq;
  cfg.layers = c.layers;
  cfg.heads = 4;
  cfg.channels = c.channels;
  cfg.dtype = c.dtype;
  return cfg;
}

inline std::unique_ptr<nvme::SwapStore> open_store(const std::string& dir) {
  nvme::SwapStoreOptions so;
  so.dirs = {dir};
  so.capacity_bytes = 256 << 20;
  so.extent_bytes = 64 << 10;
  auto r = nvme::SwapStore::open(so);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

// threads: the CpuDevice's kernel threads and the cpu lane's (0: every core).
inline Result<Built> build(const PCase& c, bool plan_only, nvme::SwapStore* store,
                           cpu::PinnedPool* pool, int threads = 0) {
  Built b;
  gpu::DeviceOptions dopt;
  dopt.memory_limit_bytes = 512 << 20;
  dopt.threads = threads;
  STRATA_ASSIGN_OR_RETURN(b.device, gpu::create_cpu_device(dopt));
  if (plan_only) b.planning = std::make_unique<gpu::PlanningDevice>(*b.device);
  b.comm = comm::create_local_comm();
  const model::GptConfig cfg = config_of(c);
  EngineConfig config;
  config.zero.stage = c.stage;
  config.precision = cfg.dtype;
  config.optimizer.grad_clip = c.grad_clip;
  if (c.nvme_fraction > 0.0) {
    config.optimizer.offload = Home::kNvme;
    config.optimizer.nvme_fraction = c.nvme_fraction;
  }
  if (c.stage == 3) config.zero.offload_param = c.offload_param;
  config.zero.offload_activations = c.offload_activations;
  config.optimizer.gpu_fraction = c.gpu_fraction;
  config.storage.nvme_buffer_count = 2;
  config.zero.prefetch_depth = 1;
  // NVMe homes use `store` (a plan-only build opens none and needs no directory).
  STRATA_ASSIGN_OR_RETURN(const SessionLayout layout,
                          Session::prepare(config, model::GptModel::block_numels(cfg), 1));
  STRATA_ASSIGN_OR_RETURN(
      b.model, model::GptModel::create(b.dev(), cfg, model::RunShape{c.batch, c.seq, c.checkpoint},
                                       layout.storage));
  if (!plan_only) STRATA_RETURN_IF_ERROR(b.model->init_params(3));
  SessionInputs inputs;
  inputs.store = store;
  inputs.pool = pool;
  inputs.plan_only = plan_only;
  inputs.host_threads = threads > 0 ? threads : int(std::thread::hardware_concurrency());
  inputs.init = slices_of([&cfg](int64_t blk) { return model::init_block(cfg, blk, 3); });
  STRATA_ASSIGN_OR_RETURN(b.session, Session::create(config, b.dev(), *b.comm, *b.model, inputs));
  b.step = b.session->zero();
  b.optimizer = &b.session->optimizer();
  std::mt19937 rng(5);
  const auto rows = static_cast<size_t>(c.batch * c.seq);
  for (size_t i = 0; i < rows; ++i) {
    b.tokens.push_back(int32_t(rng() % uint32_t(cfg.vocab)));
    b.targets.push_back(int32_t(rng() % uint32_t(cfg.vocab)));
  }
  return b;
}

// The cases both tests use: every stage, and the offload settings of each tier.
inline std::vector<PCase> planner_cases() {
  std::vector<PCase> v;
  v.push_back({.name = "stage 0"});
  v.push_back({.name = "stage 1, clipped", .stage = 1, .grad_clip = 1.0f});
  v.push_back({.name = "stage 2, half the optimizer on NVMe", .stage = 2, .nvme_fraction = 0.5});
  v.push_back({.name = "stage 3, params in pinned memory", .stage = 3});
  v.push_back({.name = "stage 3, params and all optimizer state on NVMe",
               .stage = 3,
               .nvme_fraction = 1.0,
               .offload_param = Home::kNvme});
  v.push_back({.name = "stage 3, activations to pinned memory, half the update on the device",
               .stage = 3,
               .offload_activations = Home::kPinned,
               .gpu_fraction = 0.5});
  v.push_back(
      {.name = "stage 2, activations to NVMe", .stage = 2, .offload_activations = Home::kNvme});
  return v;
}

}  // namespace strata::engine::test
