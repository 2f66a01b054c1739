// The planned step (the ZeRO step at stage 0 over one rank) against SerialStep, both built by
// engine::Session: 50 training steps of a small GPT on the synthetic addition task
// (checkpointing on, so recompute tasks run), the same losses, gradient norms and parameters,
// bit for bit: bf16 and fp32, clipping on (and active) and off, optimizer state in host RAM
// (test_planned_step on the CpuDevice, label unit; test_planned_step_gpu on a CUDA GPU, label
// gpu, skipped without one) or half of it on NVMe (test_planned_step_nvme, label nvme).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/local_comm.h"
#include "engine/session.h"
#include "gpu/cpu_device.h"
#include "model/gpt.h"
#include "model/synthetic_task.h"
#include "nvme/swap_store.h"
#include "scratch_dir.h"
#include "swap_test_util.h"
#include "tested_device.h"

namespace strata::engine {
namespace {

// The device under test (tests/gpu/tested_device.h): the CpuDevice with one kernel thread, or a
// CUDA GPU in the gpu variant; null (with the reason) when there is none.
std::unique_ptr<gpu::Device> open_device(std::string& why) {
  gpu::DeviceOptions o;
  o.memory_limit_bytes = 256 << 20;
  o.threads = 1;
  return gpu::test::open_tested_device(o, why);
}

struct Case {
  bool planned = false;
  DType dtype = DType::kBF16;
  float grad_clip = 0.5f;
  double nvme_fraction = 0.0;
  LossScalerOptions loss_scaling;  // fp16
  bool device_optimizer = false;   // planned: Adam on the device (--offload-optimizer none)
};

struct TrainRun {
  std::vector<float> losses;
  std::vector<double> norms;
  std::vector<double> scales;
  std::vector<bool> skipped;
  std::vector<std::vector<float>> params;  // by block
  std::vector<float> state;                // every partition's master, m, v after the run
};

// A one-rank session of the planned or the serial step over `m` (its masters from the model's
// device blocks).
std::unique_ptr<Session> one_rank_session(const EngineConfig& config, model::GptModel& m,
                                          nvme::SwapStore* store = nullptr) {
  static std::unique_ptr<comm::Communicator> one = comm::create_local_comm();
  SessionInputs in;
  in.store = store;
  auto s = Session::create(config, m.device(), *one, m, in);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Fewer on the emulated CUDA runtime, where a step takes seconds (every CUDA thread a fiber).
constexpr int kSteps = gpu::test::kEmulatedCuda ? 8 : 50;

TrainRun train(const Case& c, nvme::SwapStore* store) {
  TrainRun run;
  std::string why;
  auto dev_r = open_device(why);
  if (!dev_r) {
    ADD_FAILURE() << why;
    return run;
  }
  auto& dev = *dev_r;
  auto task = model::AdditionTask::create(2, 10).value();
  model::GptConfig cfg;
  cfg.vocab = model::AdditionTask::kVocab;
  cfg.max_seq = task.seq();
  cfg.layers = 3;
  cfg.heads = 4;
  cfg.channels = 32;
  cfg.dtype = c.dtype;
  const model::RunShape shape{8, task.seq(), 2};
  auto model_r = model::GptModel::create(dev, cfg, shape);
  EXPECT_TRUE(model_r.ok()) << model_r.status().to_string();
  model::GptModel& m = *model_r.value();
  EXPECT_TRUE(m.init_params(7).ok());
  EngineConfig config;
  config.precision = c.dtype;
  config.schedule.kind = c.planned ? Schedule::kPlanned : Schedule::kSerial;
  config.optimizer.adam.lr = 3e-3f;
  config.optimizer.adam.weight_decay = 0.01f;
  if (c.nvme_fraction > 0) {
    config.optimizer.offload = Home::kNvme;
    config.optimizer.nvme_fraction = c.nvme_fraction;
  }
  if (c.device_optimizer) config.optimizer.offload = Home::kDevice;
  config.storage.nvme_buffer_count = c.planned ? 2 : 3;
  config.optimizer.grad_clip = c.grad_clip;
  config.loss_scaling = c.loss_scaling;
  std::unique_ptr<Session> session = one_rank_session(config, m, store);
  if (!session) return run;
  TrainStep& train_step = session->step();
  OffloadedOptimizer& opt = session->optimizer();
  const std::vector<int64_t>& numel = session->partition_numel();
  if (c.nvme_fraction > 0) {
    size_t on_nvme = 0;
    for (size_t p = 0; p < numel.size(); ++p) on_nvme += opt.on_nvme(p) ? 1 : 0;
    EXPECT_GT(on_nvme, 0u);
    EXPECT_LT(on_nvme, numel.size());
  }
  std::vector<int32_t> tokens(static_cast<size_t>(8 * task.seq())), targets(tokens.size());
  for (int64_t step = 1; step <= kSteps; ++step) {
    task.make_batch(8, 3, 0, step, tokens.data(), targets.data());
    // A learning rate that changes every step: the planned step applies step n's update during
    // step n+1, and must still use step n's rate.
    const float lr = 3e-3f * (1.0f - 0.01f * static_cast<float>(step));
    train_step.set_lr(lr);
    auto r = train_step.run(tokens.data(), targets.data(), step, 1);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return run;
    run.losses.push_back(r->loss);
    run.norms.push_back(r->grad_norm);
    run.scales.push_back(r->loss_scale);
    run.skipped.push_back(r->skipped);
  }
  if (c.planned) {
    const Status st = train_step.flush();  // the last step's update (clipping on)
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(train_step.flush().ok());  // nothing left: a no-op
  }
  for (size_t p = 0; p < numel.size(); ++p) {
    std::vector<float> st(3 * static_cast<size_t>(numel[p]));
    const auto n = static_cast<size_t>(numel[p]);
    EXPECT_TRUE(opt.read_state(p, st.data(), st.data() + n, st.data() + 2 * n).ok());
    run.state.insert(run.state.end(), st.begin(), st.end());
  }
  for (int64_t b = 0; b < m.num_blocks(); ++b) {
    std::vector<float> p(static_cast<size_t>(m.block_numel(b)));
    EXPECT_TRUE(m.download_params(b, p.data()).ok());
    run.params.push_back(std::move(p));
  }
  return run;
}

void expect_same_bits(const TrainRun& serial, const TrainRun& planned) {
  ASSERT_EQ(serial.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(planned.losses.size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(std::memcmp(&serial.losses[s], &planned.losses[s], sizeof(float)), 0)
        << "loss at step " << s + 1 << ": " << serial.losses[s] << " vs " << planned.losses[s];
    EXPECT_EQ(serial.scales[s], planned.scales[s]) << "loss scale at step " << s + 1;
    EXPECT_EQ(serial.skipped[s], planned.skipped[s]) << "skip at step " << s + 1;
    EXPECT_EQ(std::memcmp(&serial.norms[s], &planned.norms[s], sizeof(double)), 0)
        << "norm at step " << s + 1;
  }
  ASSERT_EQ(serial.params.size(), planned.params.size());
  for (size_t b = 0; b < serial.params.size(); ++b) {
    EXPECT_EQ(std::memcmp(serial.params[b].data(), planned.params[b].data(),
                          serial.params[b].size() * sizeof(float)),
              0)
        << "parameters of block " << b;
  }
  ASSERT_EQ(serial.state.size(), planned.state.size());
  EXPECT_EQ(std::memcmp(serial.state.data(), planned.state.data(), serial.state.size() * 4), 0)
      << "optimizer state (master, m, v)";
  // The run learned something, so the comparison is not between two frozen models (in the
  // emulator's 8 steps: moved at all).
  if (gpu::test::kEmulatedCuda) {
    EXPECT_NE(serial.losses.back(), serial.losses.front());
  } else {
    EXPECT_LT(serial.losses.back(), serial.losses.front());
  }
}

#ifndef STRATA_TEST_NVME
// A one-layer model of `dtype` (V=13, T=4, B sequences) and its optimizer state in RAM, loaded
// with the model's initial parameters.
struct TinySetup {
  std::unique_ptr<model::GptModel> model;
  std::vector<int64_t> blocks;  // partition -> block
  std::unique_ptr<Session> session;
  OffloadedOptimizer* opt = nullptr;
};
TinySetup tiny_setup(gpu::Device& dev, DType dtype, int64_t batch, const EngineConfig& base = {}) {
  TinySetup t;
  model::GptConfig cfg;
  cfg.vocab = 13;
  cfg.max_seq = 4;
  cfg.layers = 1;
  cfg.heads = 2;
  cfg.channels = 16;
  cfg.dtype = dtype;
  auto m = model::GptModel::create(dev, cfg, model::RunShape{batch, 4, 0});
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  t.model = std::move(m).value();
  EXPECT_TRUE(t.model->init_params(1).ok());
  t.blocks = partition_blocks(*t.model);
  EngineConfig config = base;
  config.precision = dtype;
  t.session = one_rank_session(config, *t.model);
  if (t.session) t.opt = &t.session->optimizer();
  return t;
}

// A bad token is refused before the plan runs, so the step stays usable.
TEST(PlannedStep, BadTokensAreRefusedAndTheStepGoesOn) {
  std::string why;
  auto dev = open_device(why);
  if (!dev) GTEST_SKIP() << why;
  TinySetup t = tiny_setup(*dev, DType::kBF16, 1);
  ASSERT_NE(t.session, nullptr);
  TrainStep& step = t.session->step();
  const std::vector<int32_t> bad{1, 2, 13, 4}, good{1, 2, 3, 4}, targets{2, 3, 4, 5};
  const auto r = step.run(bad.data(), targets.data(), 1, 1);
  ASSERT_EQ(r.status().code(), ErrorCode::kConfig);
  EXPECT_NE(r.status().message().find("token 13 at position 2"), std::string::npos);
  const auto ok = step.run(good.data(), targets.data(), 1, 1);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_GT(ok->loss, 0.0f);
}

TEST(PlannedStep, MatchesTheSerialStepBitForBitInRam) {
  std::string why;
  if (!open_device(why)) GTEST_SKIP() << why;
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (float clip : {0.5f, 0.0f}) {
      Case c;
      c.dtype = dt;
      c.grad_clip = clip;
      const TrainRun serial = train(c, nullptr);
      c.planned = true;
      const TrainRun planned = train(c, nullptr);
      SCOPED_TRACE(std::string(dtype_name(dt)) + " clip " + std::to_string(clip));
      expect_same_bits(serial, planned);
      if (clip > 0) {
        bool clipped = false;
        for (double n : serial.norms) clipped = clipped || n > clip;
        EXPECT_TRUE(clipped) << "clipping never acted; the test would not cover it";
      }
    }
  }
}
// --offload-optimizer none: the optimizer state on the device, updated by Kernels::adam_step, gives
// the bits of the serial step's CPU Adam (bf16 and fp32, clipping on and off, fp16 overflows).
TEST(PlannedStep, DeviceOptimizerMatchesTheSerialStepBitForBit) {
  std::string why;
  if (!open_device(why)) GTEST_SKIP() << why;
  for (DType dt : {DType::kBF16, DType::kF32, DType::kF16}) {
    for (float clip : {0.5f, 0.0f}) {
      Case c;
      c.dtype = dt;
      c.grad_clip = clip;
      c.loss_scaling.initial_scale_power = 24;
      c.loss_scaling.hysteresis = 1;
      const TrainRun serial = train(c, nullptr);
      c.planned = true;
      c.device_optimizer = true;
      const TrainRun planned = train(c, nullptr);
      SCOPED_TRACE(std::string("device optimizer, ") + std::string(dtype_name(dt)) + " clip " +
                   std::to_string(clip));
      expect_same_bits(serial, planned);
    }
  }
}

// fp16 with dynamic loss scaling: an initial scale of 2^24 overflows the fp16 gradients, so the
// first steps are skipped (nothing updated) while the scale comes down; both steps must agree on
// every skip, scale, loss, norm and parameter.
TEST(PlannedStep, MatchesTheSerialStepBitForBitInFp16WithOverflows) {
  std::string why;
  if (!open_device(why)) GTEST_SKIP() << why;
  for (float clip : {0.5f, 0.0f}) {
    Case c;
    c.dtype = DType::kF16;
    c.grad_clip = clip;
    // Fewer overflowing steps in the emulator's shorter runs.
    c.loss_scaling.initial_scale_power = gpu::test::kEmulatedCuda ? 19 : 24;
    c.loss_scaling.hysteresis = 1;
    c.loss_scaling.loss_scale_window = 10;
    const TrainRun serial = train(c, nullptr);
    c.planned = true;
    const TrainRun planned = train(c, nullptr);
    SCOPED_TRACE("fp16 clip " + std::to_string(clip));
    expect_same_bits(serial, planned);
    int skipped = 0;
    for (bool s : serial.skipped) skipped += s ? 1 : 0;
    EXPECT_GT(skipped, 0) << "no overflow: the test would not cover the skip";
    EXPECT_LT(skipped, kSteps / 2);
    EXPECT_LT(serial.scales.back(), 16777216.0);
  }
}

// An overflowing fp16 step changes no parameter and no moment, halves the scale (hysteresis 1),
// and the first step that does not overflow updates.
TEST(PlannedStep, AnFp16OverflowChangesNothing) {
  std::string why;
  auto dev = open_device(why);
  if (!dev) GTEST_SKIP() << why;
  EngineConfig config;
  config.loss_scaling.initial_scale_power = 60;  // 2^60: every fp16 gradient overflows
  config.loss_scaling.hysteresis = 1;
  TinySetup t = tiny_setup(*dev, DType::kF16, 2, config);
  ASSERT_NE(t.session, nullptr);
  auto& m = t.model;
  auto& opt = t.opt;
  const auto& blocks = t.blocks;
  std::vector<std::vector<float>> before;
  for (int64_t b : blocks) {
    before.emplace_back(static_cast<size_t>(m->block_numel(b)));
    ASSERT_TRUE(m->download_params(b, before.back().data()).ok());
  }
  TrainStep& step = t.session->step();
  const std::vector<int32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8}, targets{2, 3, 4, 5, 6, 7, 8, 9};
  auto r = step.run(tokens.data(), targets.data(), 1, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->skipped);
  EXPECT_EQ(r->loss_scale, std::ldexp(1.0, 60));
  ASSERT_TRUE(step.flush().ok());
  for (size_t p = 0; p < blocks.size(); ++p) {
    std::vector<float> now(before[p].size()), master(before[p].size()), mom(before[p].size()),
        var(before[p].size());
    ASSERT_TRUE(m->download_params(blocks[p], now.data()).ok());
    ASSERT_TRUE(opt->read_state(p, master.data(), mom.data(), var.data()).ok());
    EXPECT_EQ(now, before[p]) << "parameters of partition " << p;
    EXPECT_EQ(master, before[p]) << "master weights of partition " << p;
    EXPECT_EQ(mom, std::vector<float>(mom.size(), 0.0f)) << "m of partition " << p;
    EXPECT_EQ(var, std::vector<float>(var.size(), 0.0f)) << "v of partition " << p;
  }
  // The scale halves on every overflow until the gradients fit; then the step updates.
  bool updated = false;
  double last_scale = r->loss_scale;
  for (int64_t s = 2; s <= 80 && !updated; ++s) {
    r = step.run(tokens.data(), targets.data(), s, 1);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->loss_scale, last_scale / 2) << "step " << s;
    last_scale = r->loss_scale;
    updated = !r->skipped;
  }
  EXPECT_TRUE(updated);
  ASSERT_TRUE(step.flush().ok());
  std::vector<float> now(before[0].size());
  ASSERT_TRUE(m->download_params(blocks[0], now.data()).ok());
  EXPECT_NE(now, before[0]);
}

#else
using nvme::SwapStore;  // for STRATA_OPEN_STORE_OR_SKIP

// A 64 MiB swap store in `dir`.
nvme::SwapStoreOptions store_options(const strata::test::ScratchDir& dir) {
  nvme::SwapStoreOptions so;
  so.dirs = {dir.path()};
  so.capacity_bytes = 64 << 20;
  return so;
}

TEST(PlannedStep, MatchesTheSerialStepBitForBitWithHalfTheStateOnNvme) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  STRATA_OPEN_STORE_OR_SKIP(store, store_options(dir));
  for (float clip : {0.5f, 0.0f}) {
    Case c;
    c.grad_clip = clip;
    c.nvme_fraction = 0.5;
    const TrainRun serial = train(c, store.get());
    c.planned = true;
    const TrainRun planned = train(c, store.get());
    SCOPED_TRACE("clip " + std::to_string(clip));
    expect_same_bits(serial, planned);
  }
}

// A byte flipped in the swap file during training (optimizer state all on NVMe) stops the next
// step with the store's checksum error naming the file and the offset; nothing is silently used,
// and the step stays failed.
TEST(PlannedStep, ACorruptedSwapExtentStopsTrainingWithTheFileAndOffset) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  STRATA_OPEN_STORE_OR_SKIP(store, store_options(dir));
  std::string why;
  auto dev = open_device(why);
  if (!dev) GTEST_SKIP() << why;
  auto task = model::AdditionTask::create(2, 10).value();
  model::GptConfig cfg;
  cfg.vocab = model::AdditionTask::kVocab;
  cfg.max_seq = task.seq();
  cfg.layers = 2;
  cfg.heads = 2;
  cfg.channels = 32;
  auto m = model::GptModel::create(*dev, cfg, model::RunShape{4, task.seq(), 0}).value();
  ASSERT_TRUE(m->init_params(3).ok());
  EngineConfig config;
  config.precision = cfg.dtype;
  config.optimizer.offload = Home::kNvme;
  config.optimizer.nvme_fraction = 1.0;
  config.storage.nvme_paths = {dir.path()};
  std::unique_ptr<Session> session = one_rank_session(config, *m, store.get());
  ASSERT_NE(session, nullptr);
  TrainStep* step = &session->step();
  std::vector<int32_t> tokens(static_cast<size_t>(4 * task.seq())), targets(tokens.size());
  for (int64_t s = 1; s <= 3; ++s) {
    task.make_batch(4, 1, 0, s, tokens.data(), targets.data());
    ASSERT_TRUE(step->run(tokens.data(), targets.data(), s, 1).ok());
  }
  ASSERT_TRUE(step->flush().ok());
  // Flip one byte inside partition 0's state, which the next update reads.
  auto loc = store->locate(Session::optimizer_key(0, 0));
  ASSERT_TRUE(loc.ok()) << loc.status().to_string();
  const auto& e = loc->front();
  nvme::test::flip_byte(e.path, e.offset + 100);
  Status failed;
  for (int64_t s = 4; s <= 5 && failed.ok(); ++s) {  // the update of step 4 reads it in run 5
    task.make_batch(4, 1, 0, s, tokens.data(), targets.data());
    failed = step->run(tokens.data(), targets.data(), s, 1).status();
  }
  if (failed.ok()) failed = step->flush();
  ASSERT_EQ(failed.code(), ErrorCode::kCorrupt) << failed.to_string();
  EXPECT_NE(failed.message().find(e.path), std::string::npos) << failed.message();
  EXPECT_NE(failed.message().find("offset " + std::to_string(e.offset)), std::string::npos)
      << failed.message();
  task.make_batch(4, 1, 0, 6, tokens.data(), targets.data());
  EXPECT_FALSE(step->run(tokens.data(), targets.data(), 6, 1).ok()) << "the step must stay failed";
}
#endif

}  // namespace
}  // namespace strata::engine
