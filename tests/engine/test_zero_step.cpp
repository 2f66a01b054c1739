// ZeroStep (ZeRO stages 0-3) under mpirun with 1, 2 and 4 ranks on the CpuDevice (label mpi):
// (built as test_zero_step_gpu with STRATA_TEST_CUDA=1, label gpu: the CudaDevice tests at the
// end of this file instead, at 1 and 2 ranks)
//   - stages 1, 2 and 3 give the bits of stage 0 (losses, norms, final parameters, each rank's
//     optimizer shard) over 20 steps, with the optimizer state in RAM, half and all on NVMe, and
//     on the device (--offload-optimizer none);
//   - with one rank, every stage gives the bits of SerialStep (the single-rank reference);
//   - N ranks agree with one rank on the whole global batch within fp32 rounding;
//   - bytes per step per collective equal the comm layer's byte accounting of the theory
//     (2Ψ(N-1)/N at stages 0-2, 3Ψ(N-1)/N at stage 3, with and without checkpointing);
//   - an fp16 overflow injected on one rank skips the step on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/local_comm.h"
#include "comm/mpi_comm.h"
#include "core/check.h"
#include "engine/config_exchange.h"
#include "engine/session.h"
#include "gpu/cpu_device.h"
#include "model/gpt.h"
#include "model/llama.h"
#include "tested_device.h"
#if STRATA_CUDA_EMULATE && STRATA_TEST_CUDA
#include "simt_device.h"
#endif
#include "model/init.h"
#include "model/synthetic_task.h"
#include "mpi_world.h"
#include "nvme/swap_store.h"
#include "scheduler/cost_model.h"
#include "scratch_dir.h"
#include "swap_test_util.h"

namespace strata::engine {
namespace {

comm::Communicator& world() { return comm::testing::mpi_world(); }

// The device train() runs on: the CpuDevice, or another for the CUDA variant's tests.
using DeviceMaker = std::function<Result<std::unique_ptr<gpu::Device>>(comm::Communicator&,
                                                                       const gpu::DeviceOptions&)>;
DeviceMaker make_device = [](comm::Communicator&, const gpu::DeviceOptions& o) {
  return gpu::create_cpu_device(o);
};

// STRATA_PLAN_DUMP=DIR: every plan a case builds is appended (sched::Plan::dump, with the step's
// memory report) to DIR/rank<R>.txt, R the process's rank in the job (the cases on a one-rank
// LocalComm run on every process), so that a refactor can show the plans unchanged.
void dump_plan_if_asked(const ZeroStep& step) {
  const char* dir = std::getenv("STRATA_PLAN_DUMP");
  if (dir == nullptr || *dir == '\0') return;
  std::ofstream out(std::string(dir) + "/rank" + std::to_string(world().rank()) + ".txt",
                    std::ios::app);
  out << "== " << ::testing::UnitTest::GetInstance()->current_test_info()->name() << '\n';
  step.plan().dump(out);
  out << "memory: " << step.memory().describe() << '\n';
}

constexpr int kSteps = 20;
constexpr int64_t kMicroBatch = 4;

struct ZCase {
  int stage = 0;
  DType dtype = DType::kBF16;
  float grad_clip = 0.5f;
  double nvme_fraction = 0.0;
  int64_t checkpoint = 2;
  int64_t persistence = 0;
  int prefetch = 1;
  bool serial = false;  // SerialStep (one rank) instead of ZeroStep
  int64_t batch = kMicroBatch;
  LossScalerOptions loss_scaling;
  int64_t inject_inf_step = 0;
  int steps = kSteps;
  bool device_optimizer = false;  // --offload-optimizer none
  double gpu_fraction = 0.0;      // --gpu-optimizer-fraction
  // ZeroStep: --delayed-update with this warm-up (-1: off). SerialStep: the reference loop of
  // the delayed update, from the same step on (step s computes with the parameters after update
  // s-2 instead of s-1).
  int64_t delayed = -1;
  Home offload_param = Home::kPinned;        // --offload-param (stage 3)
  double param_gpu_fraction = 0.0;           // --param-gpu-fraction
  Home offload_activations = Home::kDevice;  // --offload-activations
  bool expect_error = false;  // Session::create must refuse the case (ZRun::error says why)
  cpu::AdamMode adam_mode = cpu::AdamMode::kAdamW;  // kAdam: the decay as L2 on the gradient
  bool bias_correction = true;
  model::DecayRule decay_on = model::DecayRule::kAll;
  DType grad_accum_dtype = DType::kF32;  // stages 2-3 with micro > 1
  int64_t layers = 3, channels = 32;
  int staging_slots = 2;
  int micro = 1;                 // micro-batches of `batch` rows per step (gradient accumulation)
  bool layer_major = false;      // the segment-major order of the micro-batches (one replay)
  bool device_grad_sum = false;  // with it at stages 2-3: the gradients summed on the device
  bool llama = false;            // a LlamaModel (GQA, untied head) instead of a GptModel
  Collectives collectives = Collectives::kHost;  // zero.collectives (device: over the same MPI)
  comm::Communicator* device_comm = nullptr;     // ... or over this one (NCCL)
  // Called before each step; then a failing step ends the run with ZRun::error (no failure).
  std::function<void(int64_t step)> before_step;
};

struct ZRun {
  std::vector<float> losses;
  std::vector<double> norms, scales;
  std::vector<bool> skipped;
  std::vector<std::vector<float>> params;         // by block, after the last step
  std::vector<std::vector<float>> shards;         // by partition: this rank's real master|m|v
  std::vector<std::vector<float>> history;        // params of block 0 after each step (flushed)
  std::vector<std::vector<float>> state_history;  // every partition's master|m|v, likewise
  std::vector<comm::CollectiveStats> traffic;     // by kind, of the last step
  ZeroTraffic expected, last;   // the step's traffic theory, and what its last step sent
  sched::Prediction predicted;  // the cost model's work for a step, at unit rates
  ZeroMemory memory;
  int64_t partition_state_bytes = 0;  // Partitioning::model_state_bytes of the stage
  size_t device_peak = 0, model_device_bytes = 0, plan_device_bytes = 0;
  ZeroLaneBytes lanes;                         // of the last step
  std::vector<Home> homes;                     // by block
  std::vector<bool> nvme_parts;                // by partition: optimizer state on NVMe
  std::vector<bool> device_parts;              // by partition: optimizer state on the device
  std::vector<int64_t> part_blocks;            // partition -> block
  std::vector<int64_t> block_numels;           // by block
  std::string error;                           // ZCase::expect_error: Session::create's message
  int64_t segments = 0, checkpoint_bytes = 0;  // the model's checkpoint segments, one's bytes
  size_t link_tasks = 0, comm_tasks = 0;       // the plan's tasks on those lanes
};

// The same global batch for every rank count: step s's batch of kMicroBatch * N sequences;
// rank r takes rows [r*B, (r+1)*B).
void batch_rows(const model::AdditionTask& task, int64_t global_rows, int64_t step, int64_t first,
                int64_t rows, std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  std::vector<int32_t> t(static_cast<size_t>(global_rows * task.seq())), g(t.size());
  task.make_batch(global_rows, 3, 0, step, t.data(), g.data());
  const auto begin = static_cast<size_t>(first * task.seq());
  const auto n = static_cast<size_t>(rows * task.seq());
  tokens.assign(t.begin() + begin, t.begin() + begin + n);
  targets.assign(g.begin() + begin, g.begin() + begin + n);
}

ZRun train(comm::Communicator& comm, const ZCase& c, nvme::SwapStore* store,
           bool every_step_params = false) {
  ZRun run;
  gpu::DeviceOptions dopt;
  dopt.memory_limit_bytes = 256 << 20;
  dopt.threads = 1;
  auto dev_r = make_device(comm, dopt);
  EXPECT_TRUE(dev_r.ok()) << dev_r.status().to_string();
  if (!dev_r.ok()) return run;
  gpu::Device& dev = *dev_r.value();
  auto task = model::AdditionTask::create(2, 10).value();
  model::GptConfig cfg;
  cfg.vocab = model::AdditionTask::kVocab;
  cfg.max_seq = task.seq();
  cfg.layers = c.layers;
  cfg.heads = 4;
  cfg.channels = c.channels;
  cfg.dtype = c.dtype;
  // The second family: grouped-query attention (2 query heads a key/value head), untied head.
  model::LlamaConfig lcfg;
  lcfg.vocab = model::AdditionTask::kVocab;
  lcfg.max_seq = task.seq();
  lcfg.layers = c.layers;
  lcfg.heads = 4;
  lcfg.kv_heads = 2;
  lcfg.channels = c.channels;
  lcfg.intermediate = c.channels * 3 / 2;
  lcfg.dtype = c.dtype;
  const int stage = c.serial ? 0 : c.stage;
  auto parts = Partitioning::create(c.llama ? model::LlamaModel::block_numels(lcfg)
                                            : model::GptModel::block_numels(cfg),
                                    comm.size(), c.persistence)
                   .value();
  // The model holds on the device only what the stage keeps there.
  const model::RunShape shape{c.batch, task.seq(), c.checkpoint};
  const model::BlockStorage storage =
      ZeroStep::block_storage(parts, stage, c.offload_activations != Home::kDevice);
  auto make_model = [&]() -> Result<std::unique_ptr<model::Model>> {
    if (c.llama) {
      STRATA_ASSIGN_OR_RETURN(auto l, model::LlamaModel::create(dev, lcfg, shape, storage));
      STRATA_RETURN_IF_ERROR(l->init_params(7));
      return std::unique_ptr<model::Model>(std::move(l));
    }
    STRATA_ASSIGN_OR_RETURN(auto g, model::GptModel::create(dev, cfg, shape, storage));
    STRATA_RETURN_IF_ERROR(g->init_params(7));
    return std::unique_ptr<model::Model>(std::move(g));
  };
  auto model_r = make_model();
  EXPECT_TRUE(model_r.ok()) << model_r.status().to_string();
  if (!model_r.ok()) return run;
  model::Model& m = *model_r.value();
  // The engine through its front door: a session of the case's settings.
  EngineConfig config;
  config.zero.stage = stage;
  config.precision = c.dtype;
  config.schedule.kind = c.serial ? Schedule::kSerial : Schedule::kPlanned;
  config.optimizer.adam.lr = 3e-3f;
  config.optimizer.adam.weight_decay = 0.01f;
  config.optimizer.adam.mode = c.adam_mode;
  config.optimizer.adam.bias_correction = c.bias_correction;
  config.optimizer.decay_on = c.decay_on;
  config.optimizer.grad_clip = c.grad_clip;
  config.schedule.grad_accum = c.micro;
  config.schedule.microbatch_order =
      c.layer_major ? MicrobatchOrder::kLayer : MicrobatchOrder::kMicro;
  config.schedule.device_grad_sum = c.device_grad_sum;
  config.schedule.grad_accum_dtype = c.grad_accum_dtype;
  config.loss_scaling = c.loss_scaling;
  if (c.nvme_fraction > 0.0) {
    config.optimizer.offload = Home::kNvme;
    config.optimizer.nvme_fraction = c.nvme_fraction;
  }
  if (c.device_optimizer) config.optimizer.offload = Home::kDevice;
  config.optimizer.gpu_fraction = c.gpu_fraction;
  // The serial step's reference loop of the delayed update is the test's own (below).
  config.optimizer.delayed_update_warmup = c.serial ? -1 : c.delayed;
  if (c.stage == 3 || c.offload_param != Home::kPinned) config.zero.offload_param = c.offload_param;
  config.zero.param_gpu_fraction = c.param_gpu_fraction;
  config.zero.offload_activations = c.offload_activations;
  config.zero.persistence_threshold = c.persistence;
  config.zero.prefetch_depth = c.prefetch;
  if (!c.serial) config.zero.collectives = c.collectives;
  // The ZeRO step's NVMe staging; the serial step's optimizer stages through 3.
  config.storage.nvme_buffer_count = c.serial ? 3 : c.staging_slots;
  SessionInputs inputs;
  inputs.store = store;
  inputs.inject_inf_step = c.inject_inf_step;
  inputs.device_comm = c.device_comm;
  // init_params(7)'s values; the elements each block is asked for are kept (below: a rank asks
  // for its own elements only at stages 1-3).
  std::vector<std::pair<int64_t, model::ElementRange>> asked;
  inputs.init = [&asked, whole = slices_of([&cfg, &lcfg, llama = c.llama](int64_t b) {
                           return llama ? model::init_llama_block(lcfg, b, 7)
                                        : model::init_block(cfg, b, 7);
                         })](int64_t b, model::ElementRange r, float* host) {
    asked.emplace_back(b, r);
    return whole(b, r, host);
  };
  auto session_r = Session::create(config, dev, comm, m, inputs);
  if (c.expect_error) {
    EXPECT_FALSE(session_r.ok()) << "Session::create accepted the case";
    if (!session_r.ok()) run.error = session_r.status().to_string();
    return run;
  }
  EXPECT_TRUE(session_r.ok()) << session_r.status().to_string();
  if (!session_r.ok()) return run;
  Session& session = *session_r.value();
  OffloadedOptimizer& opt = session.optimizer();
  ZeroStep* zero = session.zero();
  // Each block once, and at stages 1-3 only the elements this rank owns.
  EXPECT_EQ(asked.size(), partition_blocks(m).size());
  for (const auto& [b, r] : asked) {
    const BlockPartition& bp = session.partitioning().block(size_t(b));
    const model::ElementRange own =
        stage == 0 ? model::ElementRange{0, bp.numel}
                   : model::ElementRange{bp.owned_begin(comm.rank()), bp.owned_end(comm.rank())};
    EXPECT_EQ(r, own) << "block " << b << " at stage " << stage;
  }
  TrainStep& train_step = session.step();
  if (zero != nullptr) {
    dump_plan_if_asked(*zero);
    run.expected = zero->expected_traffic(c.micro);
    sched::Rates unit;
    for (double& r : unit.per_second) r = 1.0;
    Result<sched::Prediction> predicted = zero->predict(unit, c.micro);
    EXPECT_TRUE(predicted.ok()) << predicted.status().to_string();
    if (predicted.ok()) run.predicted = *predicted;
    run.memory = zero->memory();
    run.partition_state_bytes = parts.model_state_bytes(c.stage).value().total();
    for (int64_t b = 0; b < m.num_blocks(); ++b) run.homes.push_back(zero->param_home(b));
    for (size_t p = 0; p < opt.num_partitions(); ++p) run.nvme_parts.push_back(opt.on_nvme(p));
    run.device_parts = DeviceOptimizer::choose(opt, c.device_optimizer ? 1.0 : c.gpu_fraction);
    run.part_blocks = partition_blocks(m);
    for (int64_t b = 0; b < m.num_blocks(); ++b) run.block_numels.push_back(m.block_numel(b));
    run.segments = m.num_segments();
    run.checkpoint_bytes = static_cast<int64_t>(m.checkpoint_bytes());
  }
  // One rank's share of the global batch (a one-rank run takes the whole of it).
  const int64_t global_rows = c.batch * c.micro * comm.size();
  std::vector<int32_t> tokens, targets;
  // The reference loop of the delayed update: the model's parameters after each serial step
  // (snapshots[k]: after k updates), put back one step stale once past the warm-up.
  std::vector<std::vector<std::vector<float>>> snapshots;
  auto snapshot = [&] {
    std::vector<std::vector<float>> all;
    for (int64_t b = 0; b < m.num_blocks(); ++b) {
      all.emplace_back(static_cast<size_t>(m.block_numel(b)));
      EXPECT_TRUE(m.download_params(b, all.back().data()).ok());
    }
    snapshots.push_back(std::move(all));
  };
  if (c.serial && c.delayed >= 0) snapshot();
  for (int64_t step = 1; step <= c.steps; ++step) {
    batch_rows(task, global_rows, step, comm.rank() * c.batch * c.micro, c.batch * c.micro, tokens,
               targets);
    comm.reset_stats();
    if (c.serial && c.delayed >= 0 && step > c.delayed + 1) {
      for (int64_t b = 0; b < m.num_blocks(); ++b) {
        EXPECT_TRUE(m.upload_params(b, snapshots[size_t(step - 2)][size_t(b)].data()).ok());
      }
    }
    if (c.before_step) c.before_step(step);
    // A learning rate that changes every step (a rotated update still uses its own step's).
    const float lr = 3e-3f * (1.0f - 0.01f * static_cast<float>(step));
    train_step.set_lr(lr);
    auto r = train_step.run(tokens.data(), targets.data(), step, c.micro);
    if (c.serial && c.delayed >= 0) snapshot();
    if (!r.ok() && c.before_step) {
      run.error = r.status().to_string();
      return run;
    }
    if (!r.ok()) {
      ADD_FAILURE() << r.status().to_string();
      return run;
    }
    run.traffic.clear();
    for (size_t k = 0; k < comm::kNumCollectiveKinds; ++k) {
      run.traffic.push_back(comm.stats(static_cast<comm::CollectiveKind>(k)));
    }
    if (zero) run.lanes = zero->last_lane_bytes();
    if (zero) run.link_tasks = zero->plan().lane_tasks(sched::Lane::kLink).size();
    if (zero) run.comm_tasks = zero->plan().lane_tasks(sched::Lane::kComm).size();
    if (zero) run.last = zero->last_traffic();
    run.losses.push_back(r->loss);
    run.norms.push_back(r->grad_norm);
    run.scales.push_back(r->loss_scale);
    run.skipped.push_back(r->skipped);
    if (every_step_params) {
      std::vector<float> p(static_cast<size_t>(m.block_numel(0)));
      if (zero) {
        EXPECT_TRUE(zero->flush().ok());
        EXPECT_TRUE(zero->gather_params(0, p.data()).ok());
      } else {
        EXPECT_TRUE(m.download_params(0, p.data()).ok());
      }
      run.history.push_back(std::move(p));
      std::vector<float> state;
      for (size_t q = 0; q < opt.num_partitions(); ++q) {
        const auto k = static_cast<size_t>(opt.numel(q));
        std::vector<float> st(3 * k);
        EXPECT_TRUE(opt.read_state(q, st.data(), st.data() + k, st.data() + 2 * k).ok());
        state.insert(state.end(), st.begin(), st.end());
      }
      run.state_history.push_back(std::move(state));
    }
  }
  if (zero) {
    const Status st = zero->flush();
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  for (int64_t b = 0; b < m.num_blocks(); ++b) {
    std::vector<float> p(static_cast<size_t>(m.block_numel(b)));
    const Status st = zero ? zero->gather_params(b, p.data()) : m.download_params(b, p.data());
    EXPECT_TRUE(st.ok()) << st.to_string();
    run.params.push_back(std::move(p));
  }
  run.device_peak = dev.memory_info().peak_bytes;
  run.model_device_bytes = m.device_bytes();
  if (zero) run.plan_device_bytes = zero->executor()->plan().peak_bytes(sched::Tier::kDevice);
  // This rank's real elements of each partition's state, the same slice at every stage.
  const std::vector<int64_t> blocks = partition_blocks(m);
  for (size_t p = 0; p < blocks.size(); ++p) {
    const auto n = static_cast<size_t>(opt.numel(p));
    std::vector<float> st(3 * n);
    EXPECT_TRUE(opt.read_state(p, st.data(), st.data() + n, st.data() + 2 * n).ok());
    const BlockPartition& bp = parts.block(size_t(blocks[p]));
    const int64_t begin = bp.owned_begin(comm.rank()), end = bp.owned_end(comm.rank());
    const int64_t off = stage == 0 ? begin : 0;
    std::vector<float> mine;
    for (int k = 0; k < 3; ++k) {
      const float* at = st.data() + k * n + static_cast<size_t>(off);
      mine.insert(mine.end(), at, at + (end - begin));
    }
    run.shards.push_back(std::move(mine));
  }
  return run;
}

void expect_same_bits(const ZRun& a, const ZRun& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  ASSERT_FALSE(a.losses.empty());
  for (size_t s = 0; s < a.losses.size(); ++s) {
    EXPECT_EQ(std::memcmp(&a.losses[s], &b.losses[s], sizeof(float)), 0)
        << "loss at step " << s + 1 << ": " << a.losses[s] << " vs " << b.losses[s];
    EXPECT_EQ(std::memcmp(&a.norms[s], &b.norms[s], sizeof(double)), 0)
        << "norm at step " << s + 1 << ": " << a.norms[s] << " vs " << b.norms[s];
    EXPECT_EQ(a.scales[s], b.scales[s]) << "loss scale at step " << s + 1;
    EXPECT_EQ(a.skipped[s], b.skipped[s]) << "skip at step " << s + 1;
  }
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t k = 0; k < a.params.size(); ++k) {
    EXPECT_EQ(std::memcmp(a.params[k].data(), b.params[k].data(), a.params[k].size() * 4), 0)
        << "parameters of block " << k;
  }
  ASSERT_EQ(a.shards.size(), b.shards.size());
  for (size_t p = 0; p < a.shards.size(); ++p) {
    ASSERT_EQ(a.shards[p].size(), b.shards[p].size());
    EXPECT_EQ(std::memcmp(a.shards[p].data(), b.shards[p].data(), a.shards[p].size() * 4), 0)
        << "optimizer shard (master, m, v) of partition " << p;
  }
  EXPECT_LT(a.losses.back(), a.losses.front()) << "the run learned nothing";
}

constexpr const char* kHomeNames[] = {"none", "cpu", "nvme"};  // by Home

std::string describe(const ZCase& c) {
  return "stage " + std::to_string(c.stage) + " " + std::string(dtype_name(c.dtype)) + " nvme " +
         std::to_string(c.nvme_fraction) + " persistence " + std::to_string(c.persistence) +
         " prefetch " + std::to_string(c.prefetch) + " checkpoint " + std::to_string(c.checkpoint) +
         (c.device_optimizer ? " optimizer on the device" : "") +
         (c.gpu_fraction > 0 ? " gpu optimizer fraction " + std::to_string(c.gpu_fraction) : "") +
         (c.stage == 3 ? " offload-param " + std::string(kHomeNames[int(c.offload_param)]) +
                             " param-gpu-fraction " + std::to_string(c.param_gpu_fraction)
                       : "") +
         " offload-activations " + kHomeNames[int(c.offload_activations)] +
         (c.adam_mode == cpu::AdamMode::kAdam ? " adam (L2)" : "") +
         (c.bias_correction ? "" : " no bias correction") +
         (c.decay_on == model::DecayRule::kAll ? "" : " decay on matrices") +
         (c.collectives == Collectives::kDevice ? " collectives on the device" : "") +
         (c.micro > 1 ? ", " + std::to_string(c.micro) + " micro-batches" +
                            (c.layer_major ? " segment-major" : "")
                      : "");
}

struct Store {
  std::unique_ptr<strata::test::ScratchDir> dir;
  std::unique_ptr<nvme::SwapStore> store;
};
Store open_store() {
  Store s;
  s.dir = std::make_unique<strata::test::ScratchDir>();
  EXPECT_TRUE(s.dir->ok());
  nvme::SwapStoreOptions so;
  so.dirs = {s.dir->path()};
  so.capacity_bytes = 64 << 20;
  so.extent_bytes = 64 << 10;  // small objects (42-layer models' shards) waste little space
  auto r = nvme::SwapStore::open(so);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (r.ok()) s.store = std::move(r).value();
  return s;
}

#if !STRATA_TEST_CUDA
TEST(ZeroStep, EveryStageGivesTheBitsOfStageZero) {
  comm::Communicator& comm = world();
  Store store = open_store();
  ASSERT_TRUE(store.store);
  for (DType dt : {DType::kBF16, DType::kF32}) {
    ZCase base;
    base.dtype = dt;
    const ZRun ref = train(comm, base, nullptr);
    std::vector<ZCase> cases;
    for (int stage = 1; stage <= 3; ++stage) {
      ZCase c = base;
      c.stage = stage;
      cases.push_back(c);
    }
    // --offload-optimizer none: Kernels::adam_step on the CpuDevice has the CPU Adam's bits.
    for (int stage = 0; stage <= 3; ++stage) {
      ZCase c = base;
      c.stage = stage;
      c.device_optimizer = true;
      cases.push_back(c);
      // A share on the device, the rest on the CPU (and at stage 3 half of the rest on NVMe).
      c.device_optimizer = false;
      c.gpu_fraction = 0.3;
      c.nvme_fraction = stage == 3 && dt == DType::kBF16 ? 0.5 : 0.0;
      cases.push_back(c);
    }
    if (dt == DType::kBF16) {
      for (double f : {0.5, 1.0}) {
        for (int stage : {0, 2, 3}) {
          ZCase c = base;
          c.stage = stage;
          c.nvme_fraction = f;
          cases.push_back(c);
        }
      }
      ZCase c = base;
      c.stage = 3;
      c.persistence = 20000;  // the layers stay whole, the shared block is sharded
      c.prefetch = 0;
      cases.push_back(c);
      c.persistence = 0;
      c.prefetch = 3;
      c.checkpoint = 0;
      cases.push_back(c);
    }
    for (const ZCase& c : cases) {
      SCOPED_TRACE(describe(c));
      expect_same_bits(ref, train(comm, c, c.nvme_fraction > 0 ? store.store.get() : nullptr));
    }
  }
  // Clipping off (bf16): the update is not rotated; each block's Adam follows its reduction.
  ZCase base;
  base.grad_clip = 0.0f;
  const ZRun ref = train(comm, base, nullptr);
  for (int stage = 1; stage <= 3; ++stage) {
    ZCase c = base;
    c.stage = stage;
    c.nvme_fraction = stage == 3 ? 0.5 : 0.0;
    SCOPED_TRACE(describe(c) + " clip 0");
    expect_same_bits(ref, train(comm, c, c.nvme_fraction > 0 ? store.store.get() : nullptr));
  }
}

// The collectives on the device (on the CpuDevice over the same MPI communicator): every stage,
// every home of the parameters and of the optimizer state, rotated or not, both micro-batch
// orders give stage 0's bits with the collectives on the host; the reductions are the same calls
// on the same values, only where the buffers are differs.
TEST(ZeroStep, DeviceCollectivesGiveTheBitsOfStageZero) {
  comm::Communicator& comm = world();
  Store store = open_store();
  ASSERT_TRUE(store.store);
  for (float clip : {0.5f, 0.0f}) {  // rotated, and not
    ZCase base;
    base.grad_clip = clip;
    base.steps = 8;
    const ZRun ref = train(comm, base, nullptr);
    std::vector<ZCase> cases;
    for (int stage = 0; stage <= 3; ++stage) {
      ZCase c = base;
      c.stage = stage;
      c.collectives = Collectives::kDevice;
      cases.push_back(c);
      if (clip == 0.0f) continue;
      c.gpu_fraction = 0.3;  // a share of the optimizer on the device, some on NVMe
      c.nvme_fraction = 0.4;
      cases.push_back(c);
      c.gpu_fraction = 0.0;
      c.nvme_fraction = 0.0;
      c.device_optimizer = true;
      cases.push_back(c);
    }
    for (Home home : {Home::kNvme, Home::kDevice}) {
      ZCase c = base;
      c.stage = 3;
      c.collectives = Collectives::kDevice;
      c.offload_param = home;
      cases.push_back(c);
      c.offload_param = Home::kPinned;  // some shards on the device, the rest in pinned memory
      c.param_gpu_fraction = 0.5;
      c.offload_activations = home;
      cases.push_back(c);
    }
    ZCase persistent = base;  // the layers whole at stage 3, the shared block sharded
    persistent.stage = 3;
    persistent.collectives = Collectives::kDevice;
    persistent.persistence = 20000;
    cases.push_back(persistent);
    if (clip != 0.0f) {
      // The device optimizer's new parameters kept on the device: shards updated in their device
      // home (with either lowering), whole layers' new shards all-gathered on the device.
      for (Collectives where : {Collectives::kHost, Collectives::kDevice}) {
        ZCase c = base;
        c.stage = 3;
        c.collectives = where;
        c.offload_param = Home::kDevice;
        c.device_optimizer = true;
        cases.push_back(c);
      }
      persistent.device_optimizer = true;
      cases.push_back(persistent);
    }
    for (const ZCase& c : cases) {
      SCOPED_TRACE(describe(c) + " clip " + std::to_string(clip));
      const bool nvme = c.nvme_fraction > 0 || c.offload_param == Home::kNvme ||
                        c.offload_activations == Home::kNvme;
      expect_same_bits(ref, train(comm, c, nvme ? store.store.get() : nullptr));
    }
  }
  // Micro-batches in both orders (the shards adding up in fp32 on the host at stages 2-3, so
  // these give the bits of the host collectives at the same stage, not stage 0's); with the
  // device optimizer they add up on the device (Kernels::accumulate), in fp32 and in bf16.
  for (int stage = 0; stage <= 3; ++stage) {
    for (int k = 0; k < 4; ++k) {
      ZCase c;
      c.micro = 2;
      c.steps = 6;
      c.stage = stage;
      c.layer_major = k % 2 == 1;
      c.device_optimizer = k >= 2;
      c.grad_accum_dtype = k == 3 ? DType::kBF16 : DType::kF32;
      c.offload_param = stage == 3 && c.layer_major ? Home::kNvme : Home::kPinned;
      nvme::SwapStore* s = stage == 3 ? store.store.get() : nullptr;
      const ZRun host = train(comm, c, s);
      c.collectives = Collectives::kDevice;
      SCOPED_TRACE(describe(c));
      expect_same_bits(host, train(comm, c, s));
    }
  }
}

// The device optimizer with the collectives on the device: no gradient crosses to the host in
// either direction; only each checked shard's statistics (two doubles; at stage 0 every rank's)
// come down. (LaneBytesMatchTheFormula checks the other lanes.)
TEST(ZeroStep, DeviceOptimizerKeepsTheGradientsOnTheDevice) {
  comm::Communicator& comm = world();
  for (int stage = 0; stage <= 3; ++stage) {
    ZCase c;
    c.stage = stage;
    c.steps = 3;
    c.device_optimizer = true;
    c.collectives = Collectives::kDevice;
    c.offload_param = stage == 3 ? Home::kDevice : Home::kPinned;
    SCOPED_TRACE(describe(c));
    const ZRun dev = train(comm, c, nullptr);
    const uint64_t nb = dev.params.size();
    EXPECT_EQ(dev.lanes.d2h, 16 * nb * uint64_t(stage == 0 ? comm.size() : 1));
    // ... where the host collectives bring every reduced gradient down and back up.
    c.collectives = Collectives::kHost;
    const ZRun host = train(comm, c, nullptr);
    EXPECT_GT(host.lanes.d2h, 2 * 16 * nb * uint64_t(comm.size()));
    if (stage == 3) {
      EXPECT_EQ(dev.lanes.h2d, 0u);  // the shards live on the device
    }
    expect_same_bits(host, dev);
    // The cost model prices the passes over device memory (bf16, one micro-batch: dt throughout):
    // each kept shard checked (read) and cast into its buffer (read and written); stage 0 checks
    // every rank's shard and copies the reduced gradient back into the model's block.
    const auto parts = Partitioning::create(dev.block_numels, comm.size(), 0).value();
    double bytes = 0.0;
    for (size_t b = 0; b < parts.num_blocks(); ++b) {
      const double shard = double(parts.block(b).shard_numel) * 2;
      bytes += stage == 0 ? double(comm.size()) * shard + 2.0 * double(parts.block(b).numel) * 2
                          : 3.0 * shard;
    }
    EXPECT_EQ(dev.predicted.work[int(sched::Work::kDeviceBytes)], bytes);
    EXPECT_EQ(host.predicted.work[int(sched::Work::kDeviceBytes)], 0.0);
  }
}

// Stage 3 with the collectives on the device: each gather uploads the rank's shard, 1/N of the
// block (the whole block with the collectives on the host), and the device links carry every
// collective but the statistics' and the loss's: the textbook bytes.
TEST(ZeroStep, DeviceCollectivesUploadOnlyTheShard) {
  comm::Communicator& comm = world();
  ZCase c;
  c.stage = 3;
  c.steps = 3;
  const ZRun host = train(comm, c, nullptr);
  c.collectives = Collectives::kDevice;
  const ZRun dev = train(comm, c, nullptr);
  const auto n = uint64_t(comm.size());
  const auto parts = Partitioning::create(dev.block_numels, comm.size(), 0).value();
  uint64_t shards = 0, whole = 0;  // one gather pass of every block (the shared block: one)
  for (size_t b = 0; b < parts.num_blocks(); ++b) {
    const uint64_t g = b + 1 == parts.num_blocks() ? 1 : 2;  // forward and backward
    shards += g * uint64_t(parts.block(b).shard_numel) * 2;
    whole += g * uint64_t(parts.block(b).numel) * 2;
  }
  // Rotated with pinned shards: the uploads are the gathers' alone.
  EXPECT_EQ(host.lanes.h2d, whole);
  EXPECT_EQ(dev.lanes.h2d, shards);
  EXPECT_NEAR(double(dev.lanes.h2d) * double(n) / double(host.lanes.h2d), 1.0, 0.01);
  EXPECT_EQ(host.last.device_link, 0u);
  EXPECT_EQ(dev.last.device_link, dev.expected.device_link);
  EXPECT_EQ(dev.last.total() - dev.last.stats, dev.last.device_link);
  EXPECT_EQ(dev.last.total(), host.last.total());
  if (n > 1) {
    EXPECT_GT(dev.last.device_link, 0u);
  }
}

// The second model family through the same engine: a Llama (grouped-query attention, untied
// head) at every stage, with the optimizer state and the parameters on NVMe, offloaded
// activations, fp32 and bf16, gives the bits of stage 0.
TEST(ZeroStep, LlamaGivesTheBitsOfStageZeroAtEveryStageAndTier) {
  comm::Communicator& comm = world();
  Store store = open_store();
  ASSERT_TRUE(store.store);
  for (DType dt : {DType::kBF16, DType::kF32}) {
    ZCase base;
    base.llama = true;
    base.dtype = dt;
    base.steps = 10;
    const ZRun ref = train(comm, base, nullptr);
    ASSERT_EQ(ref.losses.size(), 10u);
    EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the Llama learns";
    std::vector<ZCase> cases;
    for (int stage = 1; stage <= 3; ++stage) {
      ZCase c = base;
      c.stage = stage;
      cases.push_back(c);
    }
    // Parameters and optimizer state on NVMe, activations in pinned memory (a checkpoint every
    // layer: the gradients have the same bits with any interval).
    ZCase nvme = base;
    nvme.stage = 3;
    nvme.offload_param = Home::kNvme;
    nvme.nvme_fraction = 1.0;
    nvme.offload_activations = Home::kPinned;
    nvme.checkpoint = 1;
    cases.push_back(nvme);
    ZCase device = base;  // the optimizer on the device
    device.stage = 2;
    device.device_optimizer = true;
    cases.push_back(device);
    for (const ZCase& c : cases) {
      SCOPED_TRACE("llama " + describe(c));
      const bool on_nvme = c.nvme_fraction > 0 || c.offload_param == Home::kNvme;
      expect_same_bits(ref, train(comm, c, on_nvme ? store.store.get() : nullptr));
    }
  }
}

// --offload-param none|cpu|nvme x --param-gpu-fraction 0, 0.5, 1 at stage 3 give the bits of
// stage 0, with the update rotated (clipping) and not, beside optimizer state on NVMe and on the
// device; the fraction chooses as documented; below stage 3, NVMe parameters and a fraction are
// refused.
TEST(ZeroStep, ParameterTiersGiveTheBitsOfStageZero) {
  comm::Communicator& comm = world();
  Store store = open_store();
  ASSERT_TRUE(store.store);
  for (float clip : {0.5f, 0.0f}) {
    ZCase base;
    base.grad_clip = clip;
    const ZRun ref = train(comm, base, nullptr);
    std::vector<ZCase> cases;
    for (Home home : {Home::kPinned, Home::kNvme}) {
      for (double f : {0.0, 0.5, 1.0}) {
        ZCase c = base;
        c.stage = 3;
        c.offload_param = home;
        c.param_gpu_fraction = f;
        c.nvme_fraction = f == 0.5 ? 0.5 : 0.0;
        cases.push_back(c);
      }
    }
    ZCase c = base;
    c.stage = 3;
    c.offload_param = Home::kDevice;
    cases.push_back(c);
    if (clip > 0) {  // the optimizer on the device: rotated only
      c.offload_param = Home::kNvme;
      c.param_gpu_fraction = 0.5;
      c.gpu_fraction = 0.3;
      cases.push_back(c);
      c.offload_param = Home::kDevice;
      c.param_gpu_fraction = 0.0;
      c.gpu_fraction = 1.0;
      cases.push_back(c);
    }
    // Activation checkpoints offloaded (to pinned memory, to NVMe) at stages 0, 2 and 3, one and
    // two segments of three layers moved (K = 1, 2), beside parameters on NVMe.
    for (int stage : {0, 2, 3}) {
      for (Home act : {Home::kPinned, Home::kNvme}) {
        ZCase a = base;
        a.stage = stage;
        a.offload_activations = act;
        a.checkpoint = act == Home::kPinned ? 1 : 2;
        a.offload_param = stage == 3 && act == Home::kNvme ? Home::kNvme : Home::kPinned;
        cases.push_back(a);
      }
    }
    for (const ZCase& z : cases) {
      SCOPED_TRACE(describe(z) + " clip " + std::to_string(clip));
      const ZRun r = train(comm, z, store.store.get());
      expect_same_bits(ref, r);
      // The fraction's choice: forward order (shared block first), half a block's rounding.
      const double f = z.offload_param == Home::kDevice ? 1.0 : z.param_gpu_fraction;
      ASSERT_EQ(r.homes.size(), r.params.size());
      double total = 0, taken = 0;
      for (const auto& p : r.params) total += double(p.size());
      std::vector<size_t> order{r.params.size() - 1};
      for (size_t b = 0; b + 1 < r.params.size(); ++b) order.push_back(b);
      for (size_t b : order) {
        const double n = double(r.params[b].size());
        // Below stage 3 every block is whole on the device.
        const bool resident = z.stage < 3 || taken + 0.5 * n <= f * total;
        if (resident) taken += n;
        EXPECT_EQ(r.homes[b], resident ? Home::kDevice : z.offload_param) << "block " << b;
      }
    }
  }
  for (int stage = 0; stage <= 2; ++stage) {
    ZCase c;
    c.stage = stage;
    c.offload_param = Home::kNvme;
    c.expect_error = true;
    std::string r = train(comm, c, store.store.get()).error;
    EXPECT_NE(r.find("`zero.offload_param` nvme needs `zero.stage` 3"), std::string::npos) << r;
    c.offload_param = Home::kPinned;
    c.param_gpu_fraction = 0.5;
    r = train(comm, c, store.store.get()).error;
    EXPECT_NE(r.find("`zero.param_gpu_fraction` needs `zero.stage` 3"), std::string::npos) << r;
  }
}

// Deeper models with every tier on NVMe plan within their budgets and still give stage 0's bits.
// Each failed to plan once: the greedy placement filled the pinned budget with read-ahead whose
// consumers then found no room (at 12 layers the optimizer state's reads, now waiting for
// earlier write-backs; at 42 layers with checkpoints every 6 the backward gathers' shard reads,
// which started with the step, now no more than prefetch_depth ahead of the compute).
TEST(ZeroStep, DeepModelsWithEveryTierOnNvmePlanAndMatch) {
  comm::Communicator& comm = world();
  Store store = open_store();
  ASSERT_TRUE(store.store);
  for (int64_t layers : {6, 12, 42}) {
    ZCase base;
    base.layers = layers;
    base.channels = layers > 12 ? 32 : 128;
    base.staging_slots = 3;
    base.prefetch = 2;
    base.checkpoint = 0;
    base.steps = 4;
    base.nvme_fraction = 0.5;
    const ZRun ref = train(comm, base, store.store.get());
    ZCase c = base;
    c.stage = 3;
    c.offload_param = Home::kNvme;
    SCOPED_TRACE(describe(c) + " layers " + std::to_string(layers));
    expect_same_bits(ref, train(comm, c, store.store.get()));
    c.offload_activations = Home::kNvme;  // and the checkpoints there too
    c.checkpoint = 3;
    expect_same_bits(ref, train(comm, c, store.store.get()));
    ZCase all = base;  // all of the optimizer state there as well (bench_capacity's tiers)
    all.nvme_fraction = 1.0;
    const ZRun ref_all = train(comm, all, store.store.get());
    all.stage = 3;
    all.offload_param = Home::kNvme;
    all.offload_activations = Home::kNvme;
    all.checkpoint = layers > 12 ? 6 : 3;  // about sqrt(L), as bench_capacity
    expect_same_bits(ref_all, train(comm, all, store.store.get()));
  }
}

// A byte flipped in a parameter shard's swap extent between steps stops training at the next
// read of that shard (the forward's), with an error naming the file and the extent's offset;
// nothing is silently used. (Clipping off: each step's update writes the shard during its
// backward, so the flip between steps meets the next forward's read; with the update rotated
// into the next run the shard would be rewritten first.) One rank (a LocalComm, on every rank of
// the job by itself): with several, the others would wait in a gather the failed rank never
// joins, until the caller's Communicator::abort (train_gpt's) or the watchdog ends the job.
TEST(ZeroStep, ACorruptedParameterShardStopsTrainingWithTheFileAndOffset) {
  auto local = comm::create_local_comm();
  comm::Communicator& comm = *local;
  Store store = open_store();
  ASSERT_TRUE(store.store);
  ZCase c;
  c.grad_clip = 0.0f;
  c.stage = 3;
  c.offload_param = Home::kNvme;
  c.steps = 6;
  nvme::ExtentLocation hit;
  c.before_step = [&](int64_t step) {
    if (step != 4) return;
    auto where = store.store->locate(Session::shard_key(0, 0));  // block 0's shard
    ASSERT_TRUE(where.ok()) << where.status().to_string();
    ASSERT_FALSE(where->empty());
    hit = where->front();
    nvme::test::flip_byte(hit.path, hit.offset + 10);
  };
  const ZRun r = train(comm, c, store.store.get());
  ASSERT_EQ(r.losses.size(), 3u) << "steps 1-3 train, step 4 stops: " << r.error;
  EXPECT_NE(r.error.find("corrupt"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find(hit.path), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("offset " + std::to_string(hit.offset)), std::string::npos) << r.error;
}

// Offloaded checkpoints leave the device: the model holds only the last segment's kept input
// ((S-1) checkpoints fewer), the plan at most two at a time (one written or read in the forward,
// one brought back ahead of its recompute), pinned memory all S-1 of them (cpu) or staging only
// (nvme, where all S-1 are).
TEST(ZeroStep, OffloadedActivationsLeaveTheDevice) {
  comm::Communicator& comm = world();
  Store store = open_store();
  ASSERT_TRUE(store.store);
  ZCase c;
  c.stage = 2;
  c.checkpoint = 1;
  c.steps = 2;
  const ZRun kept = train(comm, c, nullptr);
  for (Home act : {Home::kPinned, Home::kNvme}) {
    c.offload_activations = act;
    SCOPED_TRACE(describe(c));
    const ZRun r = train(comm, c, store.store.get());
    ASSERT_EQ(r.segments, 3);
    const int64_t cb = r.checkpoint_bytes, moved = (r.segments - 1) * cb;
    EXPECT_EQ(int64_t(kept.model_device_bytes) - int64_t(r.model_device_bytes), moved);
    EXPECT_EQ(r.memory.device_activations, kept.memory.device_activations - moved);
    EXPECT_GT(r.memory.device_checkpoints, 0);
    EXPECT_LE(r.memory.device_checkpoints, 2 * cb);
    if (act == Home::kPinned) {
      EXPECT_EQ(r.memory.pinned_checkpoints, moved);
      EXPECT_EQ(r.memory.nvme_checkpoints, 0);
    } else {
      EXPECT_LE(r.memory.pinned_checkpoints, 2 * cb);  // staging to and from NVMe
      EXPECT_EQ(r.memory.nvme_checkpoints, moved);
    }
  }
}

// Bytes per transfer lane per step (steady state: one update applied), counted by the engine's
// transfer tasks, against the formula of docs/zero.md computed here from the shards and homes:
// per block of n elements (shard c, e bytes each, g = 2 uses for a layer, 1 for the shared
// block) and its optimizer partition of k elements:
//   d2h:        n e (the gradient) + g c e (device shard, several ranks: down for each gather)
//               + k e (optimizer on the device, stages 1-3: the new values)
//   h2d:        g n e (a gathered block, for each use) + n e (a block kept whole: new params)
//               + c e (device shard: the new shard) + k e (optimizer on the device: gradient)
//   NVMe read:  g c e (shard on NVMe; (g-1) c e with the update rotated: the forward gathers
//               the new shard from the update's staging) + 12 k (optimizer state on NVMe)
//   NVMe write: c e (shard on NVMe) + 12 k (optimizer state on NVMe)
// With K micro-batches the gradient terms (n e down) count K times at stages 2-3, once at 0-1;
// the gathers' terms (g n e up, g c e down or read; less one read rotated) and the offloaded
// checkpoints' K times in the micro-batch-major order and once in the segment-major one.
// One rank at stage 0 with the optimizer on the device updates the model's blocks in place (no
// gradient up, no new params); one rank's device shard is used in place (no gather, no upload).
// The optimizer on the device at stages 1-3 keeps the new values of a device-homed shard, or of
// a block kept whole with the collectives on the device, on the device (no k e down, no new
// params or new shard up).
TEST(ZeroStep, LaneBytesMatchTheFormula) {
  comm::Communicator& comm = world();
  const int64_t n_ranks = comm.size();
  Store store = open_store();
  ASSERT_TRUE(store.store);
  std::vector<ZCase> cases;
  for (int k = 0; k < 16; ++k) {
    ZCase c;
    c.steps = 3;
    c.grad_clip = k % 2 == 0 && k != 12 ? 0.5f : 0.0f;
    c.stage = k < 2 ? k : k == 10 ? 2 : k == 11 ? 0 : k == 14 ? 1 : 3;
    c.nvme_fraction = k == 1 || k == 3 || k == 5 ? 0.5 : 0.0;
    c.device_optimizer = k == 0 || k >= 14;
    c.gpu_fraction = k == 4 ? 0.3 : 0.0;
    c.offload_param = k < 2 || k == 14    ? Home::kPinned
                      : k == 2 || k == 15 ? Home::kDevice
                      : k == 3            ? Home::kPinned
                                          : Home::kNvme;
    c.param_gpu_fraction = k >= 3 && k != 6 && k < 14 ? 0.5 : 0.0;
    c.offload_activations = k == 1 || k == 4 ? Home::kNvme : k == 2 ? Home::kPinned : Home::kDevice;
    c.checkpoint = 1;
    // K micro-batches: stage 3 with the parameters on NVMe (rotated and not) and in pinned
    // memory, both orders; stages 0 and 2 segment-major.
    if (k >= 7 && k < 14) {
      c.micro = 3;
      c.layer_major = k != 7;
      c.offload_activations = k == 7 || k == 8 ? Home::kPinned
                              : k == 12        ? Home::kNvme
                                               : Home::kDevice;
      c.offload_param = c.stage == 3 && k != 9 ? Home::kNvme : Home::kPinned;
      c.param_gpu_fraction = 0.0;
      c.device_grad_sum = k == 13;  // the gradients down once per step
    }
    cases.push_back(c);
    c.collectives = Collectives::kDevice;
    cases.push_back(c);
  }
  for (const ZCase& c : cases) {
    SCOPED_TRACE(describe(c));
    const ZRun r = train(comm, c, store.store.get());
    ASSERT_EQ(r.homes.size(), r.params.size());
    // The collectives on the device: only shards cross (a gathered block's, a gradient's, new
    // parameters'), but stage 0's whole reduced gradient down.
    const bool dev = c.collectives == Collectives::kDevice;
    const auto parts = Partitioning::create(model::GptModel::block_numels([&] {
                                              model::GptConfig cfg;
                                              cfg.vocab = model::AdditionTask::kVocab;
                                              cfg.max_seq =
                                                  model::AdditionTask::create(2, 10).value().seq();
                                              cfg.layers = 3;
                                              cfg.heads = 4;
                                              cfg.channels = 32;
                                              return cfg;
                                            }()),
                                            int(n_ranks), 0);
    ASSERT_TRUE(parts.ok());
    const uint64_t e = 2;  // bf16
    ZeroLaneBytes want;
    const size_t nb = r.params.size();
    const bool rotated = c.grad_clip > 0 || c.device_optimizer || c.gpu_fraction > 0;
    // K micro-batches: gradients down once per micro-batch at stages 2-3 (once at 0-1); each
    // gather (and checkpoint) once per micro-batch, or once per step segment-major.
    const uint64_t K = uint64_t(c.micro), grads = c.stage >= 2 && !c.device_grad_sum ? K : 1;
    const uint64_t R = c.layer_major ? 1 : K;
    std::vector<size_t> part_of(nb);
    for (size_t p = 0; p < nb; ++p) part_of[size_t(r.part_blocks[p])] = p;
    for (size_t b = 0; b < nb; ++b) {
      const BlockPartition& bp = parts->block(b);
      const uint64_t n = uint64_t(bp.numel), sh = uint64_t(bp.shard_numel);
      const uint64_t g = b + 1 == nb ? 1 : 2;
      const bool sharded = c.stage == 3;
      const bool in_place_shard = sharded && r.homes[b] == Home::kDevice && n_ranks == 1;
      const size_t p = part_of[b];
      const bool on_dev = r.device_parts[p];
      // The device optimizer's new parameters stay on the device (a device-homed shard, or a
      // block kept whole with the collectives on the device): nothing down, nothing up.
      const bool stays = on_dev && c.stage >= 1 && (sharded ? r.homes[b] == Home::kDevice : dev);
      const uint64_t N = uint64_t(n_ranks);
      // The device optimizer's gradient with the collectives on the device: kept there, only
      // its statistics come down (two doubles a checked shard; at stage 0 every rank's).
      const bool kept = dev && on_dev;
      want.d2h += kept ? 16 * (c.stage == 0 ? N : 1)
                       : grads *
                             (!dev           ? n
                              : c.stage == 0 ? N * sh
                                             : sh) *
                             e;
      if (sharded && !in_place_shard && !(dev && r.homes[b] == Home::kDevice)) {
        want.h2d += R * g * (dev ? sh : n) * e;
      }
      if (sharded && r.homes[b] == Home::kDevice && n_ranks > 1 && !dev) {
        want.d2h += R * g * sh * e;
      }
      // Rotated, the first forward gathers the update's new shard from its staging: no read
      // for it.
      const uint64_t reads = R * g - (rotated ? 1 : 0);
      if (sharded && r.homes[b] == Home::kNvme) want.nvme_read += reads * sh * e;
      if (sharded && r.homes[b] == Home::kNvme) want.nvme_write += sh * e;
      if (sharded && r.homes[b] == Home::kDevice && !stays) want.h2d += sh * e;
      const uint64_t k = c.stage == 0 ? n : sh;
      if (!sharded && !(on_dev && c.stage == 0) && !stays) {
        want.h2d += (dev && c.stage >= 1 ? sh : n) * e;
      }
      if (on_dev && !kept && !(n_ranks == 1 && c.stage == 0)) want.h2d += k * e;
      if (on_dev && c.stage >= 1 && !stays) want.d2h += k * e;
      if (r.nvme_parts[p]) {
        want.nvme_read += 12 * k;
        want.nvme_write += 12 * k;
      }
    }
    // Offloaded checkpoints: every segment's kept input but the last's, down and up once, and
    // through NVMe when they live there.
    if (c.offload_activations != Home::kDevice) {
      const uint64_t moved = K * uint64_t(r.segments - 1) * uint64_t(r.checkpoint_bytes);
      want.d2h += moved;
      want.h2d += moved;
      if (c.offload_activations == Home::kNvme) {
        want.nvme_read += moved;
        want.nvme_write += moved;
      }
    }
    auto near = [](uint64_t got, uint64_t expect, const char* lane) {
      EXPECT_LE(std::fabs(double(got) - double(expect)), 0.01 * double(expect))
          << lane << ": " << got << " bytes, formula " << expect;
    };
    near(r.lanes.h2d, want.h2d, "h2d");
    near(r.lanes.d2h, want.d2h, "d2h");
    near(r.lanes.nvme_read, want.nvme_read, "nvme read");
    near(r.lanes.nvme_write, want.nvme_write, "nvme write");
  }
}

// With one rank every stage is the single-rank step: the bits of SerialStep (a LocalComm, so this
// runs on every rank of the job by itself).
TEST(ZeroStep, OneRankGivesTheBitsOfTheSerialStep) {
  auto local = comm::create_local_comm();
  for (float clip : {0.5f, 0.0f}) {  // rotated, and not
    ZCase ref;
    ref.serial = true;
    ref.grad_clip = clip;
    const ZRun serial = train(*local, ref, nullptr);
    for (int k = 0; k < 8; ++k) {
      ZCase c;
      c.grad_clip = clip;
      c.stage = k % 4;
      c.device_optimizer = k == 4 || k == 5;  // stages 0 and 1: the optimizer on the device
      c.gpu_fraction = k >= 6 ? 0.5 : 0.0;    // stages 2 and 3: half of it there
      SCOPED_TRACE(describe(c) + " clip " + std::to_string(clip));
      expect_same_bits(serial, train(*local, c, nullptr));
    }
  }
}

// DeepSpeed's Adam variants (adam_w_mode false: the decay as L2 on the gradient; no bias
// correction) and the weight decay on the matrices only (AdamW and L2): one rank gives the serial
// step's bits at every stage, with the optimizer on the CPU and on the device, and every stage over
// the world's ranks gives stage 0's. Each variant trains differently from the default AdamW (the
// setting reaches the optimizer).
TEST(ZeroStep, AdamVariantsGiveTheBitsOfTheSerialStepAndOfStageZero) {
  auto local = comm::create_local_comm();
  comm::Communicator& comm = world();
  const ZRun adamw = train(*local, ZCase{}, nullptr);
  for (int v = 0; v < 5; ++v) {
    ZCase variant;
    variant.adam_mode = v == 1 || v == 3 ? cpu::AdamMode::kAdamW : cpu::AdamMode::kAdam;
    variant.bias_correction = v == 0 || v >= 3;
    variant.decay_on = v >= 3 ? model::DecayRule::kMatrices : model::DecayRule::kAll;
    ZCase ref = variant;
    ref.serial = true;
    const ZRun serial = train(*local, ref, nullptr);
    EXPECT_NE(serial.params, adamw.params) << describe(variant);
    for (int k = 0; k < 5; ++k) {
      ZCase c = variant;
      c.stage = k % 4;
      c.device_optimizer = k == 4;
      SCOPED_TRACE(describe(c) + " one rank");
      expect_same_bits(serial, train(*local, c, nullptr));
    }
    const ZRun stage0 = train(comm, variant, nullptr);
    for (int k = 1; k < 5; ++k) {
      ZCase c = variant;
      c.stage = k % 4;
      c.device_optimizer = k == 4;
      SCOPED_TRACE(describe(c) + " all ranks");
      expect_same_bits(stage0, train(comm, c, nullptr));
    }
  }
}

// N ranks of B sequences against one rank of N*B (fp32): the same step up to the order of fp32
// sums (the gradient sum over rows is split between ranks). Bounds: losses within 1e-4
// relative, parameters within 1e-4 absolute after 20 steps (Adam moves a parameter by at most
// about lr = 3e-3 per step, so this is 2% of one step's movement).
TEST(ZeroStep, RankCountsAgreeWithinFp32Rounding) {
  comm::Communicator& comm = world();
  auto local = comm::create_local_comm();
  ZCase one;
  one.dtype = DType::kF32;
  one.serial = true;
  one.batch = kMicroBatch * comm.size();
  const ZRun ref = train(*local, one, nullptr);
  for (int stage : {0, 3}) {
    ZCase c;
    c.dtype = DType::kF32;
    c.stage = stage;
    SCOPED_TRACE(describe(c));
    const ZRun z = train(comm, c, nullptr);
    ASSERT_EQ(z.losses.size(), ref.losses.size());
    for (size_t s = 0; s < z.losses.size(); ++s) {
      EXPECT_NEAR(z.losses[s], ref.losses[s], 1e-4 * std::fabs(ref.losses[s])) << "step " << s + 1;
    }
    double worst = 0;
    for (size_t b = 0; b < z.params.size(); ++b) {
      for (size_t i = 0; i < z.params[b].size(); ++i) {
        worst = std::max(worst, double(std::fabs(z.params[b][i] - ref.params[b][i])));
      }
    }
    EXPECT_LT(worst, 1e-4);
  }
}

// Gradient accumulation: two micro-batches of B rows per rank against one batch of 2B rows, at
// every stage, with the update rotated (clipping) and not (fp32; the same bounds as above: the
// gradient sums differ in order only). With one rank at stages 0-1 the gradients add up on the
// device as in the serial step: the same bits as its two micro-batches.
TEST(ZeroStep, GradientAccumulationAgreesWithOneLargerBatch) {
  comm::Communicator& comm = world();
  auto local = comm::create_local_comm();
  for (float clip : {1.0f, 0.0f}) {
    ZCase big;
    big.dtype = DType::kF32;
    big.grad_clip = clip;
    big.batch = 2 * kMicroBatch;
    big.steps = 10;
    const ZRun ref = train(comm, big, nullptr);
    for (int stage = 0; stage <= 3; ++stage) {
      ZCase c;
      c.dtype = DType::kF32;
      c.grad_clip = clip;
      c.stage = stage;
      c.micro = 2;
      c.steps = 10;
      SCOPED_TRACE(describe(c) + " clip " + std::to_string(clip) + ", 2 micro-batches");
      const ZRun z = train(comm, c, nullptr);
      ASSERT_EQ(z.losses.size(), ref.losses.size());
      for (size_t s = 0; s < z.losses.size(); ++s) {
        EXPECT_NEAR(z.losses[s], ref.losses[s], 1e-4 * std::fabs(ref.losses[s]))
            << "step " << s + 1;
        EXPECT_NEAR(z.norms[s], ref.norms[s], 1e-4 * ref.norms[s]) << "step " << s + 1;
      }
      double worst = 0;
      for (size_t b = 0; b < z.params.size(); ++b) {
        for (size_t i = 0; i < z.params[b].size(); ++i) {
          worst = std::max(worst, double(std::fabs(z.params[b][i] - ref.params[b][i])));
        }
      }
      EXPECT_LT(worst, 1e-4);
    }
  }
  if (comm.rank() != 0) return;
  ZCase serial;
  serial.serial = true;
  serial.micro = 2;
  const ZRun s = train(*local, serial, nullptr);
  for (int stage : {0, 1}) {
    ZCase c;
    c.stage = stage;
    c.micro = 2;
    SCOPED_TRACE(describe(c) + ", 2 micro-batches against the serial step");
    expect_same_bits(s, train(*local, c, nullptr));
  }
}

// The segment-major order of the micro-batches (one replay, every micro-batch through a
// checkpoint segment before the next) gives the bits of one replay per micro-batch: losses,
// norms, parameters and optimizer state over the steps, at stages 0 and 1, bf16 and fp32,
// checkpoint intervals 1 and 2 and none, clipped (rotated update) or not, GPT (a tied head: its
// gradient kept apart until the last micro-batch in both orders) and Llama (untied); and the
// refusals of what it does not run yet.
TEST(ZeroStep, SegmentMajorMicroBatchesGiveTheBitsOfOneReplayEach) {
  comm::Communicator& comm = world();
  Store store = open_store();
  ASSERT_TRUE(store.store);
  for (int k = 0; k < 18; ++k) {
    ZCase c;
    c.stage = k % 4;
    c.micro = k < 8 ? 2 : 3;
    c.steps = 6;
    c.dtype = k % 5 == 3 ? DType::kF32 : DType::kBF16;
    c.checkpoint = k % 3 == 0 ? 1 : k % 3 == 1 ? 2 : 0;
    c.grad_clip = k == 2 || k == 5 || k == 11 ? 0.0f : 0.5f;
    c.llama = k % 7 >= 5 || k == 11;
    // Stage 3's parameters at every home, the optimizer's state on NVMe, the reduced
    // gradients added in the model's dtype.
    if (c.stage == 3)
      c.offload_param = k == 3 ? Home::kPinned : k == 7 ? Home::kNvme : Home::kDevice;
    if (k == 11 || k == 14) c.nvme_fraction = 0.5;
    if (k == 10) c.grad_accum_dtype = DType::kBF16;
    if (k == 15) c.persistence = 20000;  // the layers whole, the shared block sharded
    // The checkpoints of every (segment, micro-batch) offloaded.
    if (k == 1 || k == 6 || k == 9) c.offload_activations = Home::kPinned;
    if (k == 7 || k == 12) c.offload_activations = Home::kNvme;
    // 8 micro-batches over 20 steps: stage 3 with the shards and the checkpoints on NVMe, and
    // stage 2 with them in pinned memory.
    if (k >= 16) {
      c.stage = k == 16 ? 3 : 2;
      c.micro = 8;
      c.steps = 20;
      c.checkpoint = 1;
      c.offload_activations = k == 16 ? Home::kNvme : Home::kPinned;
      c.offload_param = k == 16 ? Home::kNvme : Home::kPinned;
    }
    const bool nvme = c.nvme_fraction > 0 || c.offload_param == Home::kNvme ||
                      c.offload_activations == Home::kNvme;
    const ZRun ref = train(comm, c, nvme ? store.store.get() : nullptr);
    c.layer_major = true;
    SCOPED_TRACE(describe(c));
    expect_same_bits(ref, train(comm, c, nvme ? store.store.get() : nullptr));
  }
  for (int k = 1; k < 5; ++k) {
    ZCase c;
    c.micro = 2;
    c.steps = 1;
    c.layer_major = true;
    c.expect_error = true;
    if (k == 1) c.serial = true;
    // The device sum: at stages 2-3, segment-major, several micro-batches only.
    c.device_grad_sum = k >= 2;
    c.stage = k == 2 ? 1 : k >= 3 ? 2 : 0;
    if (k == 3) c.layer_major = false;
    if (k == 4) c.micro = 1;
    const ZRun r = train(comm, c, nullptr);
    EXPECT_NE(r.error.find(k < 2 ? "`schedule.microbatch_order` layer"
                                 : "`schedule.device_grad_sum` needs"),
              std::string::npos)
        << r.error;
  }
}

// The segment-major order with the micro-batches' gradients summed on the device at stages 2-3
// (device_grad_sum) gives the bits of stage 0 with the same micro-batches (which sums them on
// the device too, in the same order; a tied head's part kept apart until the last embedding
// backward in both): losses, norms, parameters and optimizer state, at every parameter home, and
// the gradient traffic once per step.
TEST(ZeroStep, DeviceGradientSumGivesTheBitsOfStageZero) {
  comm::Communicator& comm = world();
  Store store = open_store();
  ASSERT_TRUE(store.store);
  for (int k = 0; k < 6; ++k) {
    ZCase c;
    c.micro = k < 3 ? 2 : 3;
    c.steps = 6;
    c.dtype = k == 4 ? DType::kF32 : DType::kBF16;
    c.checkpoint = k % 3 == 0 ? 1 : k % 3 == 1 ? 2 : 0;
    c.grad_clip = k == 1 ? 0.0f : 0.5f;
    c.llama = k == 2 || k == 5;
    const ZRun ref = train(comm, c, nullptr);  // stage 0, micro-batch-major
    c.stage = k % 2 == 0 ? 3 : 2;
    c.layer_major = true;
    c.device_grad_sum = true;
    if (c.stage == 3)
      c.offload_param = k == 0 ? Home::kNvme : k == 2 ? Home::kPinned : Home::kDevice;
    if (k == 3) c.nvme_fraction = 0.5;
    const bool nvme = c.nvme_fraction > 0 || c.offload_param == Home::kNvme;
    SCOPED_TRACE(describe(c) + ", summed on the device");
    const ZRun r = train(comm, c, nvme ? store.store.get() : nullptr);
    expect_same_bits(ref, r);
    EXPECT_EQ(r.expected.grad_reduce_scatter, ref.expected.grad_reduce_scatter);
  }
}

// Stages 2-3 add the micro-batches' reduced gradients in fp32 (bf16 model, 4 micro-batches):
// the same bits at stage 2 and 3, with the optimizer on the CPU, on the device, split, and half
// on NVMe; and other bits than adding them in bf16 (the setting reaches the plan).
TEST(ZeroStep, Fp32GradientAccumulationGivesTheSameBitsOnEveryOptimizerHome) {
  comm::Communicator& comm = world();
  Store store = open_store();
  ASSERT_TRUE(store.store);
  ZCase base;
  base.stage = 2;
  base.micro = 4;
  base.steps = 6;
  const ZRun ref = train(comm, base, nullptr);
  for (int k = 0; k < 6; ++k) {
    ZCase c = base;
    c.stage = k % 2 == 0 ? 3 : 2;
    c.device_optimizer = k == 0 || k == 1;
    c.gpu_fraction = k == 2 || k == 3 ? 0.5 : 0.0;
    c.nvme_fraction = k >= 4 ? 0.5 : 0.0;
    SCOPED_TRACE(describe(c) + ", 4 micro-batches");
    expect_same_bits(ref, train(comm, c, c.nvme_fraction > 0 ? store.store.get() : nullptr));
  }
  ZCase bf16 = base;
  bf16.grad_accum_dtype = DType::kBF16;
  EXPECT_NE(train(comm, bf16, nullptr).params, ref.params);
}

// Bytes per step: each collective kind as the engine's theory says (the comm layer counts the
// textbook bytes of the calls really made), and the totals within 1% of ZeRO's 2Ψ(N-1)/N and
// 3Ψ(N-1)/N for Ψ real (unpadded) 16-bit elements; with K micro-batches (docs/zero.md), the
// reduce-scatter K times at stages 2-3, and at stage 3 the gathers K times in the
// micro-batch-major order and once in the segment-major one. The cost model counts the same
// calls and bytes.
TEST(ZeroStep, BytesPerStepMatchTheTheory) {
  comm::Communicator& comm = world();
  const uint64_t n = static_cast<uint64_t>(comm.size());
  for (int stage = 0; stage <= 3; ++stage) {
    for (int v = 0; v < (stage >= 2 ? 5 : 4); ++v) {
      ZCase c;
      c.stage = stage;
      c.checkpoint = v == 1 ? 0 : 2;
      c.micro = v >= 2 ? 3 : 1;
      c.layer_major = v >= 3;
      c.device_grad_sum = v == 4;  // one reduce-scatter per step
      c.steps = 3;
      SCOPED_TRACE(describe(c));
      const ZRun z = train(comm, c, nullptr);
      ASSERT_EQ(z.traffic.size(), comm::kNumCollectiveKinds);
      auto sent = [&](comm::CollectiveKind k) { return z.traffic[size_t(k)].bytes_sent; };
      const ZeroTraffic& e = z.expected;
      EXPECT_EQ(sent(comm::CollectiveKind::kReduceScatter), e.grad_reduce_scatter);
      const uint64_t loss_bytes = 2 * (n - 1) * 4 / n;
      EXPECT_EQ(sent(comm::CollectiveKind::kAllReduce), loss_bytes);
      EXPECT_EQ(sent(comm::CollectiveKind::kAllGather),
                e.grad_all_gather + e.param_all_gather + (e.stats - loss_bytes));
      // The cost model's collectives are the step's: its calls and bytes sent, the moving ones
      // (all-gathers) apart from the reducing ones (the loss's all-reduce is outside the plan).
      using sched::Work;
      auto work = [&](Work w) { return z.predicted.work[int(w)]; };
      auto calls = [&](comm::CollectiveKind k) { return double(z.traffic[size_t(k)].calls); };
      EXPECT_EQ(work(Work::kNetBytes), double(sent(comm::CollectiveKind::kAllGather)));
      EXPECT_EQ(work(Work::kNetCalls), calls(comm::CollectiveKind::kAllGather));
      EXPECT_EQ(work(Work::kNetReduceBytes), double(sent(comm::CollectiveKind::kReduceScatter)));
      EXPECT_EQ(work(Work::kNetReduceCalls), calls(comm::CollectiveKind::kReduceScatter));
      // ZeRO's figures: 2 bytes per element, Ψ elements, (N-1)/N per pass; 2 passes at stages
      // 0-2 (reduce-scatter + all-gather) and 3 at stage 3, less one for the shared block,
      // whose backward reads no parameter (one gather serves the embedding and the head). K
      // micro-batches: K reduce-scatters at stages 2-3, K gathers of each use at stage 3 (1
      // segment-major).
      double psi = 0;
      for (const auto& p : z.params) psi += static_cast<double>(p.size());
      const double shared = static_cast<double>(z.params.back().size());
      const double k = stage >= 2 && !c.device_grad_sum ? c.micro : 1;
      const double g = c.layer_major ? 1 : c.micro;
      const double passes = stage == 3 ? k * psi + g * (2.0 * psi - shared) : (k + 1.0) * psi;
      const double theory = passes * 2.0 * double(n - 1) / double(n);
      const double moved =
          static_cast<double>(e.grad_reduce_scatter + e.grad_all_gather + e.param_all_gather);
      if (n == 1) {
        EXPECT_EQ(moved, 0.0);
      } else {
        EXPECT_NEAR(moved / theory, 1.0, 0.01) << moved << " bytes vs theory " << theory;
      }
    }
  }
}

// Per-rank model state from the engine's own accounting against DESIGN.md §1 (16Ψ, 4Ψ + 12Ψ/N,
// 2Ψ + 14Ψ/N, 16Ψ/N bytes at stages 0-3) within 5% (the padding of the shards), and the device
// pool's peak: the model's buffers (activations, and the parameter and gradient blocks the stage
// keeps on the device: 4Ψ at stages 0-1, 2Ψ at 2, none at 3) plus the plan's device working set
// (gathered blocks and gradients in flight), plus with --offload-optimizer none the fp32 state
// (12Ψ at stage 0, 12Ψ/N from stage 1), nothing else. (The stage-3 16-bit shards live in pinned
// host memory, where the reductions and gathers run.)
TEST(ZeroStep, ModelStateBytesMatchDesignFormulas) {
  comm::Communicator& comm = world();
  const double n = comm.size();
  for (int k = 0; k < 8; ++k) {
    const int stage = k % 4;
    ZCase c;
    c.stage = stage;
    c.steps = 2;
    c.device_optimizer = k >= 4;  // nothing offloaded: master, m and v on the device too
    SCOPED_TRACE(describe(c));
    const ZRun z = train(comm, c, nullptr);
    double psi = 0;
    for (const auto& p : z.params) psi += static_cast<double>(p.size());
    const double formula[4] = {16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n,
                               16 * psi / n};
    // Exactly the partitioning's figure (shards padded to N equal parts), and the formula up to
    // that padding: at most N-1 elements of 16 bytes per block.
    EXPECT_EQ(z.memory.model_state(), z.partition_state_bytes) << z.memory.describe();
    EXPECT_NEAR(static_cast<double>(z.memory.model_state()), formula[stage],
                16.0 * (n - 1) * static_cast<double>(z.params.size()))
        << z.memory.describe();
    EXPECT_EQ(z.memory.optimizer_device,
              c.device_optimizer ? z.memory.master + z.memory.exp_avg + z.memory.exp_avg_sq : 0);
    // The working set by kind: gathered copies only at stage 3 (within the device peak); whole
    // gradient reduction buffers in pinned memory at stages 0-1 (2Ψ, padded).
    if (stage == 3) {
      EXPECT_GT(z.memory.device_gathered, 0);
      EXPECT_LE(z.memory.device_gathered, z.memory.device_working);
    } else {
      EXPECT_EQ(z.memory.device_gathered, 0);
    }
    if (stage <= 1) {
      EXPECT_NEAR(static_cast<double>(z.memory.pinned_grads), 2 * psi, 2 * n * 4.0 * 2);
    }
    // On the device: 16-bit parameters whole below stage 3, gradients whole below stage 2.
    const double on_device = (stage < 3 ? 2 * psi : 0) + (stage < 2 ? 2 * psi : 0);
    const double blocks = static_cast<double>(z.model_device_bytes) -
                          static_cast<double>(z.memory.device_activations);
    EXPECT_NEAR(blocks, on_device, 256.0 * 2 * static_cast<double>(z.params.size()));
    // The pool rounds each allocation up to 256 bytes: allow that for the model's ~40 buffers.
    const double optimizer_on_device =
        c.device_optimizer
            ? static_cast<double>(z.memory.master + z.memory.exp_avg + z.memory.exp_avg_sq)
            : 0.0;
    EXPECT_NEAR(
        static_cast<double>(z.device_peak),
        static_cast<double>(z.model_device_bytes + z.plan_device_bytes) + optimizer_on_device,
        40 * 256.0)
        << z.memory.describe();
  }
}

// The device cap decides: a model whose parameters and gradients (4Ψ) do not fit the CpuDevice
// cap is refused at stage 0 before any step, with the numbers, and trains at stage 3.
TEST(ZeroStep, StageThreeTrainsAModelStageZeroCannotHold) {
  comm::Communicator& comm = world();
  auto task = model::AdditionTask::create(2, 10).value();
  model::GptConfig cfg;
  cfg.vocab = model::AdditionTask::kVocab;
  cfg.max_seq = task.seq();
  cfg.layers = 16;
  cfg.heads = 4;
  cfg.channels = 64;
  cfg.dtype = DType::kBF16;
  const model::RunShape shape{4, task.seq(), 2};
  const double psi = static_cast<double>(cfg.num_params());
  auto parts = Partitioning::create(model::GptModel::block_numels(cfg), comm.size(), 0).value();
  auto init = slices_of([&cfg](int64_t b) { return model::init_block(cfg, b, 3); });
  // The cap: the activations plus half of stage 0's 4Ψ bytes of blocks.
  size_t activations = 0;
  {
    gpu::DeviceOptions o;
    o.threads = 1;
    auto dev = gpu::create_cpu_device(o).value();
    auto m = model::GptModel::create(*dev, cfg, shape, ZeroStep::block_storage(parts, 3));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    activations = m.value()->device_bytes();
  }
  const size_t cap = activations + static_cast<size_t>(2 * psi);
  for (int stage : {0, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    gpu::DeviceOptions o;
    o.threads = 1;
    o.memory_limit_bytes = cap;
    auto dev = gpu::create_cpu_device(o).value();
    auto m = model::GptModel::create(*dev, cfg, shape, ZeroStep::block_storage(parts, stage));
    if (stage == 0) {
      ASSERT_FALSE(m.ok());
      EXPECT_EQ(m.status().code(), ErrorCode::kOutOfMemory);
      // The pool's message has the numbers: requested, in use and the limit.
      EXPECT_NE(m.status().message().find("in use"), std::string::npos) << m.status().to_string();
      EXPECT_NE(m.status().message().find("limit"), std::string::npos) << m.status().to_string();
      continue;
    }
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EngineConfig config;
    config.zero.stage = 3;
    config.optimizer.adam = cpu::AdamHyper{};
    SessionInputs inputs;
    inputs.init = init;
    auto session = Session::create(config, *dev, comm, *m.value(), inputs);
    ASSERT_TRUE(session.ok()) << session.status().to_string();
    ZeroStep* step = session.value()->zero();
    dump_plan_if_asked(*step);
    std::vector<int32_t> tokens(static_cast<size_t>(4 * task.seq())), targets(tokens.size());
    // One batch again and again: the loss must fall.
    task.make_batch(4, 9, static_cast<uint64_t>(comm.rank()), 1, tokens.data(), targets.data());
    float first = 0, last = 0;
    for (int64_t s = 1; s <= 8; ++s) {
      auto r = step->run(tokens.data(), targets.data(), s);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      (s == 1 ? first : last) = r->loss;
    }
    EXPECT_LT(last, first);
    EXPECT_LE(dev->memory_info().peak_bytes, cap);
    // The working set is a few blocks: less than half the model's 16-bit parameters.
    EXPECT_LT(static_cast<double>(step->executor()->plan().peak_bytes(sched::Tier::kDevice)), psi);
  }
}

// What rank 0 decides (the planner's --auto choice) is every rank's config after
// broadcast_config, whatever each rank had.
TEST(ZeroStep, EveryRankGetsRankZerosEngineConfig) {
  comm::Communicator& comm = world();
  EngineConfig c;
  c.zero.stage = comm.rank() == 0 ? 3 : 1;
  c.zero.offload_param = comm.rank() == 0 ? std::optional<Home>(Home::kNvme) : std::nullopt;
  c.zero.param_gpu_fraction = comm.rank() == 0 ? 0.1 : 0.0;
  c.storage.nvme_paths = {"rank " + std::to_string(comm.rank())};
  c.optimizer.adam.lr = comm.rank() == 0 ? 1.5e-4f : 9.0f;
  ASSERT_TRUE(broadcast_config(c, comm, 0).ok());
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_param, std::optional<Home>(Home::kNvme));
  EXPECT_EQ(c.zero.param_gpu_fraction, 0.1);
  EXPECT_EQ(c.storage.nvme_paths, std::vector<std::string>{"rank 0"});
  EXPECT_EQ(c.optimizer.adam.lr, 1.5e-4f);
  // A config the text cannot carry is refused on every rank together (none waits).
  c.optimizer.grad_clip = comm.rank() == 0 ? std::nanf("") : 1.0f;
  const Status st = broadcast_config(c, comm, 0);
  if (comm.size() > 1) {
    EXPECT_EQ(st.code(), ErrorCode::kConfig) << st.to_string();
  }
}

// --delayed-update: after the warm-up, step s computes with the parameters from before update
// s-1, exactly as a reference loop written here does it (SerialStep with the model's parameters
// put back one step stale); one rank, stages 0-2, bit for bit. Over the job's ranks, stage 2
// gives the bits of stage 0, and both learn.
TEST(ZeroStep, DelayedUpdateIsExactlyOneStepStale) {
  auto local = comm::create_local_comm();
  ZCase ref;
  ref.serial = true;
  ref.delayed = 3;
  const ZRun reference = train(*local, ref, nullptr);
  ZCase ordinary;
  ordinary.serial = true;
  const ZRun fresh = train(*local, ordinary, nullptr);
  // The reference really is stale after the warm-up, and only then.
  for (size_t s = 0; s < 4; ++s) EXPECT_EQ(reference.losses[s], fresh.losses[s]) << s + 1;
  EXPECT_NE(reference.losses[4], fresh.losses[4]);
  for (int stage = 0; stage <= 2; ++stage) {
    ZCase c;
    c.stage = stage;
    c.delayed = 3;
    SCOPED_TRACE(describe(c) + " delayed update, warm-up 3");
    expect_same_bits(reference, train(*local, c, nullptr));
  }
  comm::Communicator& comm = world();
  ZCase c;
  c.delayed = 3;
  const ZRun zero = train(comm, c, nullptr);
  c.stage = 2;
  SCOPED_TRACE("delayed update over the job's ranks, stage 2 against stage 0");
  expect_same_bits(zero, train(comm, c, nullptr));
}

// fp16: an Inf in one rank's gradient (injected before the reduction) skips that step on every
// rank, halves the loss scale and changes no parameter and no moment; the scale doubles again
// after loss_scale_window clean steps.
TEST(ZeroStep, Fp16OverflowOnOneRankSkipsTheStepEverywhere) {
  comm::Communicator& comm = world();
  for (int stage : {0, 3}) {
    ZCase c;
    c.stage = stage;
    c.dtype = DType::kF16;
    c.loss_scaling.initial_scale_power = 12;
    c.loss_scaling.hysteresis = 1;
    c.loss_scaling.loss_scale_window = 4;
    c.steps = 10;
    c.inject_inf_step = comm.rank() == comm.size() - 1 ? 3 : 0;
    SCOPED_TRACE(describe(c));
    const ZRun z = train(comm, c, nullptr, /*every_step_params=*/true);
    ASSERT_EQ(z.skipped.size(), 10u);
    for (int s = 0; s < 10; ++s) EXPECT_EQ(z.skipped[size_t(s)], s == 2) << "step " << s + 1;
    // Step 3 skipped: its update (applied by flush) changed nothing.
    // ... and no moment (this rank's optimizer state, every partition); the steps around it did.
    EXPECT_EQ(z.history[2], z.history[1]);
    EXPECT_NE(z.history[1], z.history[0]);
    EXPECT_EQ(z.state_history[2], z.state_history[1]);
    EXPECT_NE(z.state_history[1], z.state_history[0]);
    EXPECT_NE(z.state_history[3], z.state_history[2]);
    EXPECT_EQ(z.scales[2], 4096.0);
    EXPECT_EQ(z.scales[3], 2048.0);
    // Clean steps 4..7 (window 4) double the scale for step 8.
    EXPECT_EQ(z.scales[6], 2048.0);
    EXPECT_EQ(z.scales[7], 4096.0);
    // Every rank saw the same steps.
    std::vector<float> mine{z.losses.back()}, all(static_cast<size_t>(comm.size()));
    ASSERT_TRUE(comm.all_gather(mine.data(), all.data(), 1, DType::kF32).ok());
    for (float l : all) EXPECT_EQ(l, all[0]);
  }
  // Without a flush after each step (the skipped update is dropped inside run()): stages 1-3
  // give the bits of stage 0, with the optimizer on the CPU and on the device.
  for (bool device : {false, true}) {
    ZCase c;
    c.dtype = DType::kF16;
    c.loss_scaling.initial_scale_power = 12;
    c.loss_scaling.hysteresis = 1;
    c.loss_scaling.loss_scale_window = 4;
    c.steps = 10;
    c.device_optimizer = device;
    c.inject_inf_step = comm.rank() == comm.size() - 1 ? 3 : 0;
    const ZRun ref = train(comm, c, nullptr);
    ASSERT_EQ(ref.skipped.size(), 10u);
    EXPECT_TRUE(ref.skipped[2]);
    for (int stage = 0; stage <= 3; ++stage) {
      for (Collectives where : {Collectives::kHost, Collectives::kDevice}) {
        if (stage == 0 && where == Collectives::kHost) continue;  // the reference
        c.stage = stage;
        c.collectives = where;
        SCOPED_TRACE(describe(c) + " fp16, no flush between steps");
        expect_same_bits(ref, train(comm, c, nullptr));
      }
    }
    c.collectives = Collectives::kHost;
  }
}

#endif  // !STRATA_TEST_CUDA

#if STRATA_TEST_CUDA
// The ZeRO step over CudaDevice (a GPU, or the emulated CUDA runtime of tests/cuda_emu): a device
// per rank (the local rank modulo the devices), collectives over MPI on pinned host memory as on
// the CpuDevice, the optimizer state offloaded to the host and at stage 3 the parameters too;
// fewer steps where the device is emulated (a step takes seconds there).
Result<std::unique_ptr<gpu::Device>> cuda_device(comm::Communicator& comm,
                                                 const gpu::DeviceOptions& o) {
  gpu::DeviceOptions c = o;
  c.ordinal = comm.local_rank() % gpu::cuda_device_count();
  return gpu::create_device(gpu::DeviceKind::kCuda, c);
}

constexpr int kCudaSteps = gpu::test::kEmulatedCuda ? 6 : kSteps;

// Stages 1-3 (over NCCL 0-3) and stage 3 with the parameters and half the optimizer state on
// NVMe (over NCCL also with the shards on the device) give the bits of stage 0 with the
// collectives on the host; over NCCL the device links carry the collectives' textbook bytes, and
// the collectives run on the link lane (a device stream ordered by events): the host's comm
// lane keeps only the gradient statistics' exchange, one task.
void expect_stage_zero_bits_on_cuda(comm::Communicator* nccl) {
  comm::Communicator& comm = world();
  make_device = cuda_device;
  Store store = open_store();
  ASSERT_TRUE(store.store);
  ZCase base;
  base.steps = kCudaSteps;
  const ZRun ref = train(comm, base, nullptr);
  if (nccl != nullptr) {
    base.collectives = Collectives::kDevice;
    base.device_comm = nccl;
  }
  std::vector<ZCase> cases;
  for (int stage = nccl != nullptr ? 0 : 1; stage <= 3; ++stage) {
    ZCase c = base;
    c.stage = stage;
    cases.push_back(c);
  }
  ZCase c = cases.back();  // stage 3, the parameters and half the optimizer state on NVMe
  c.offload_param = Home::kNvme;
  c.nvme_fraction = 0.5;
  cases.push_back(c);
  c.offload_param = Home::kDevice;  // the shards on the device: all-gathered where they are
  c.nvme_fraction = 0.0;
  if (nccl != nullptr) {
    cases.push_back(c);
    c.offload_param = Home::kPinned;  // the checkpoints in pinned memory
    c.offload_activations = Home::kPinned;
    cases.push_back(c);
    c = base;  // the optimizer on the device: the gradients kept, added up and checked there
    for (int stage : {0, 1, 2, 3}) {
      c.stage = stage;
      c.device_optimizer = true;
      c.offload_param = stage == 3 ? Home::kDevice : Home::kPinned;
      cases.push_back(c);
    }
  }
  for (const ZCase& z : cases) {
    SCOPED_TRACE(describe(z) + (nccl != nullptr ? " over NCCL" : ""));
    const ZRun r = train(comm, z, z.nvme_fraction > 0 ? store.store.get() : nullptr);
    expect_same_bits(ref, r);
    EXPECT_EQ(r.last.device_link, r.expected.device_link);
    if (nccl != nullptr) {
      EXPECT_GT(r.link_tasks, 0u);
      EXPECT_LE(r.comm_tasks, 1u);
    } else {
      EXPECT_EQ(r.link_tasks, 0u);
    }
  }
  if (nccl == nullptr) return;
  // Two micro-batches at stage 3 in both orders (the shards adding up in fp32 on the host): the
  // bits of the collectives on the host.
  for (bool layer_major : {false, true}) {
    ZCase z;
    z.steps = kCudaSteps;
    z.stage = 3;
    z.micro = 2;
    z.layer_major = layer_major;
    const ZRun host = train(comm, z, nullptr);
    z.collectives = Collectives::kDevice;
    z.device_comm = nccl;
    SCOPED_TRACE(describe(z) + " over NCCL");
    expect_same_bits(host, train(comm, z, nullptr));
  }
}

TEST(ZeroStepOnCuda, EveryStageGivesTheBitsOfStageZero) {
  if (gpu::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU on this machine";
  expect_stage_zero_bits_on_cuda(nullptr);
}

// The collectives on the GPUs over NCCL (on the emulated runtime: NCCL emulated over MPI, which
// sums in rank order in fp32 as the MPI communicator does).
TEST(ZeroStepOnCuda, NcclCollectivesGiveTheBitsOfStageZero) {
  if (gpu::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU on this machine";
  if (!comm::nccl_built()) GTEST_SKIP() << "this build has no NCCL";
  auto nccl = comm::create_communicator(comm::Backend::kNccl, comm::CommOptions::from_env(),
                                        world().local_rank() % gpu::cuda_device_count());
  ASSERT_TRUE(nccl.ok()) << nccl.status().to_string();
  expect_stage_zero_bits_on_cuda(nccl->get());
}

#if STRATA_CUDA_EMULATE
// The real CudaDevice's host side (streams, events, copies, pinned registration) changes no bit:
// the same runs on the SIMT device (the same kernels, the same reference matmul, a CpuDevice's
// streams) give the same losses, norms, parameters and optimizer shards.
TEST(ZeroStepOnCuda, GivesTheBitsOfTheSimtDevice) {
  comm::Communicator& comm = world();
  Store store = open_store();
  ASSERT_TRUE(store.store);
  for (int stage : {0, 3}) {
    ZCase c;
    c.steps = kCudaSteps;
    c.stage = stage;
    c.offload_param = stage == 3 ? Home::kNvme : Home::kPinned;
    c.nvme_fraction = stage == 3 ? 0.5 : 0.0;
    nvme::SwapStore* s = c.nvme_fraction > 0 ? store.store.get() : nullptr;
    make_device = cuda_device;
    const ZRun cuda = train(comm, c, s);
    make_device = [](comm::Communicator&, const gpu::DeviceOptions& o) {
      return gpu::test::create_simt_device(o);
    };
    const ZRun simt = train(comm, c, s);
    SCOPED_TRACE(describe(c));
    expect_same_bits(simt, cuda);
  }
}
#endif  // STRATA_CUDA_EMULATE
#endif  // STRATA_TEST_CUDA

}  // namespace
}  // namespace strata::engine
