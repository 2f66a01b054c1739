// engine::Session, the front door (label nvme, CpuDevice, one rank):
//   - the swap store it opens holds what a run stores: every state, shard and checkpoint on
//     NVMe at stage 3, trained a few steps, stays within the capacity formula, and the disk
//     holds all of that data and no more than an extent of rounding per stored object;
//   - the key layout gives every object of every rank its own key (optimizer partitions, shards
//     and checkpoints of ranks 0..63 never meet);
//   - what it refuses, in one line naming the field: a precision unlike the model's, a bad
//     config (validate()); and a model on another device;
//   - weight decay by rule: with zero gradients one step only decays, so after it exactly the
//     tensors the rule names (worked out here from their names) are p * (1 - lr * wd) and the
//     others unchanged, at stages 0 and 2;
//   - the micro-batches' gradients at stage 2 add up in fp32 by default: over 64 micro-batches
//     (bf16 model) the accumulated gradient is the float64 sum of the micro-batches' own
//     gradients to fp32 rounding, where adding them in bf16 drifts by about 1%;
//   - what it reports: a step with a plan holds 16 bytes per parameter at stage 0 on one rank
//     (ZeRO's 2 + 2 + 12, bf16) and its prediction is K times one micro-batch's for K
//     micro-batches; the serial step has neither report nor prediction.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "comm/local_comm.h"
#include "engine/session.h"
#include "gpu/cpu_device.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/param_layout.h"
#include "model/synthetic_task.h"
#include "planner/session_prediction.h"
#include "scratch_dir.h"

namespace strata::engine {
namespace {

model::GptConfig small_config() {
  model::GptConfig cfg;
  cfg.vocab = model::AdditionTask::kVocab;
  cfg.max_seq = 10;
  cfg.layers = 4;
  cfg.heads = 2;
  cfg.channels = 32;
  cfg.dtype = DType::kBF16;
  return cfg;
}

TEST(Session, TheStoreItOpensHoldsEverythingARunStores) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto dev = gpu::create_cpu_device({}).value();
  auto one = comm::create_local_comm();
  const model::GptConfig cfg = small_config();
  EngineConfig config;
  config.zero.stage = 3;
  config.optimizer.offload = Home::kNvme;
  config.optimizer.nvme_fraction = 1.0;
  config.zero.offload_param = Home::kNvme;
  config.zero.offload_activations = Home::kNvme;
  config.storage.nvme_paths = {dir.path()};
  auto layout = Session::prepare(config, model::GptModel::block_numels(cfg), 1).value();
  auto m = model::GptModel::create(*dev, cfg, model::RunShape{2, 10, 1}, layout.storage).value();
  ASSERT_GE(m->num_segments(), 3);  // checkpoints to store
  SessionInputs inputs;  // the masters from the initialisation (the device holds no block)
  inputs.init = slices_of([&cfg](int64_t b) { return model::init_block(cfg, b, 5); });
  auto s = Session::create(config, *dev, *one, *m, inputs);
  if (!s.ok() && s.status().code() == ErrorCode::kUnsupported) GTEST_SKIP() << s.status().message();
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  nvme::SwapStore* store = s.value()->store();
  ASSERT_NE(store, nullptr);
  const uint64_t capacity = Session::swap_capacity(config, *m, s.value()->partition_numel());
  EXPECT_GE(store->capacity_bytes(), capacity);  // the store rounds up to whole extents
  auto task = model::AdditionTask::create(2, 10).value();
  std::vector<int32_t> tokens(20), targets(20);
  for (int64_t step = 1; step <= 3; ++step) {
    task.make_batch(2, 3, 0, step, tokens.data(), targets.data());
    auto r = s.value()->step().run(tokens.data(), targets.data(), step, 1);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }
  ASSERT_TRUE(s.value()->step().flush().ok());
  const uint64_t used = store->used_bytes();
  EXPECT_LE(used, capacity);
  // What the run stores: 12 bytes per optimizer element, the 16-bit shards and the checkpoints
  // of every segment but the last, all of it on the disk,
  uint64_t elements = 0;
  for (int64_t n : s.value()->partition_numel()) elements += uint64_t(n);
  const uint64_t stored = 14 * elements + uint64_t(m->num_segments() - 1) * m->checkpoint_bytes();
  EXPECT_GE(used, stored);
  // and no more than one extent of rounding per stored object (the formula's slack is larger).
  const uint64_t objects = 2 * uint64_t(m->num_blocks()) + uint64_t(m->num_segments());
  EXPECT_LE(used, stored + objects * Session::swap_extent(config));
}

TEST(Session, TheKeyLayoutGivesEveryObjectOfEveryRankItsOwnKey) {
  std::set<uint64_t> keys;
  size_t n = 0;
  for (int rank = 0; rank < 64; ++rank) {
    // Up to 4096 blocks/partitions and segments each (far more than a model has).
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{4095}}) {
      keys.insert(Session::optimizer_key(rank, size_t(i)));
      keys.insert(Session::shard_key(rank, i));
      keys.insert(Session::checkpoint_key(rank, i));
      n += 3;
    }
    // The ranges do not overlap: the last of one kind below the first of the next.
    EXPECT_LT(Session::optimizer_key(rank, 4095), Session::shard_key(rank, 0));
    EXPECT_LT(Session::shard_key(rank, 4095), Session::checkpoint_key(rank, 0));
    EXPECT_LT(Session::checkpoint_key(rank, 4095), Session::optimizer_key(rank + 1, 0));
  }
  EXPECT_EQ(keys.size(), n);
}

TEST(Session, RefusesWhatOnlyItCanCheckNamingTheField) {
  auto dev = gpu::create_cpu_device({}).value();
  const model::GptConfig cfg = small_config();
  auto m = model::GptModel::create(*dev, cfg, model::RunShape{2, 10, 0}).value();
  auto one = comm::create_local_comm();
  EngineConfig fp32;
  fp32.precision = DType::kF32;
  auto r = Session::create(fp32, *dev, *one, *m, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kConfig);
  EXPECT_EQ(r.status().message().rfind(ref(Field::kPrecision), 0), 0u) << r.status().message();
  EngineConfig bad;
  bad.zero.prefetch_depth = 99;
  r = Session::create(bad, *dev, *one, *m, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind(ref(Field::kPrefetchDepth), 0), 0u) << r.status().message();
  // What the planner resolves (planner::choose), left unresolved.
  EngineConfig order;
  order.schedule.grad_accum = 2;
  order.schedule.microbatch_order = MicrobatchOrder::kAuto;
  EngineConfig offload;
  offload.zero.stage = 3;
  offload.offload_auto = true;
  for (const auto& [config, field] :
       {std::pair{order, Field::kMicrobatchOrder}, std::pair{offload, Field::kOffloadAuto}}) {
    r = Session::create(config, *dev, *one, *m, {});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(ref(field)), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("planner::choose"), std::string::npos);
  }
  // Another device than the model's.
  auto other = gpu::create_cpu_device({}).value();
  r = Session::create(EngineConfig{}, *other, *one, *m, {});
  EXPECT_FALSE(r.ok());
}

TEST(Session, WeightDecayReachesExactlyTheTensorsItsRuleNames) {
  auto dev = gpu::create_cpu_device({}).value();
  const model::GptConfig cfg = small_config();
  auto one = comm::create_local_comm();
  // The rules by name: llm.c's 2-D weights; Hugging Face's all but biases and LayerNorm weights.
  auto decays = [](model::DecayRule rule, const std::string& name) {
    if (rule == model::DecayRule::kAll) return true;
    if (rule == model::DecayRule::kMatrices) {
      return name == "wte" || name == "wpe" || name == "qkvw" || name == "attprojw" ||
             name == "fcw" || name == "fcprojw";
    }
    return name.back() != 'b' && name.rfind("ln", 0) != 0;
  };
  for (model::DecayRule rule :
       {model::DecayRule::kAll, model::DecayRule::kMatrices, model::DecayRule::kNoBiasNorm}) {
    for (int stage : {0, 2}) {
      SCOPED_TRACE("rule " + std::to_string(int(rule)) + " stage " + std::to_string(stage));
      EngineConfig config;
      config.zero.stage = stage;
      config.optimizer.adam.lr = 0.01f;
      config.optimizer.adam.weight_decay = 0.1f;
      config.optimizer.decay_on = rule;
      auto layout = Session::prepare(config, model::GptModel::block_numels(cfg), 1).value();
      auto m =
          model::GptModel::create(*dev, cfg, model::RunShape{2, 10, 0}, layout.storage).value();
      SessionInputs inputs;
      inputs.init = slices_of([&cfg](int64_t b) { return model::init_block(cfg, b, 5); });
      auto s = Session::create(config, *dev, *one, *m, inputs).value();
      OffloadedOptimizer& opt = s->optimizer();
      const std::vector<int64_t> blocks = partition_blocks(*m);
      std::vector<std::vector<float>> before, zeros;
      std::vector<PartitionGrad> grads;
      for (size_t p = 0; p < opt.num_partitions(); ++p) {
        const float* master = opt.master_params(p, nullptr);
        before.emplace_back(master, master + opt.numel(p));
        zeros.emplace_back(size_t(opt.numel(p)), 0.0f);
      }
      for (auto& z : zeros) grads.push_back({z.data(), DType::kF32, nullptr, DType::kBF16});
      ASSERT_TRUE(opt.step(grads, cpu::AdamStep{1, 1.0f}).ok());
      const float decay = static_cast<float>(1.0 - 0.01 * double(0.1f));
      for (size_t p = 0; p < opt.num_partitions(); ++p) {
        const int64_t b = blocks[p];
        model::TensorSpan t[12];
        const int n =
            b == cfg.layers ? model::shared_tensors(cfg, t) : model::layer_tensors(cfg, t);
        const float* after = opt.master_params(p, nullptr);
        for (int i = 0; i < n; ++i) {
          const bool d = decays(rule, t[i].name);
          for (int64_t e = t[i].offset; e < t[i].offset + t[i].numel; ++e) {
            const float want = d ? before[p][size_t(e)] * decay : before[p][size_t(e)];
            ASSERT_EQ(after[e], want) << t[i].name << " element " << e - t[i].offset;
          }
        }
      }
    }
  }
}

// Adam with beta1 0, lr 0 and no clipping keeps the gradient (times 1/K) as its m and never moves
// the weights: m after a step of K micro-batches is their accumulated gradient, and m after a
// one-micro-batch step is that micro-batch's own.
TEST(Session, MicroBatchGradientsAddUpInFp32WithoutDrift) {
  constexpr int K = 64;
  constexpr int64_t B = 2;
  auto dev = gpu::create_cpu_device({}).value();
  const model::GptConfig cfg = small_config();
  auto one = comm::create_local_comm();
  auto task = model::AdditionTask::create(2, 10).value();
  const int64_t T = task.seq();
  std::vector<int32_t> tokens(size_t(K * B * T)), targets(tokens.size());
  task.make_batch(K * B, 3, 0, 1, tokens.data(), targets.data());
  // The m of every partition after a step of `k` micro-batches from micro-batch `first` on.
  struct Run {
    std::unique_ptr<model::GptModel> model;
    std::unique_ptr<Session> session;
  };
  auto start = [&](int accum, DType acc_dtype) {
    EngineConfig config;
    config.zero.stage = 2;
    config.optimizer.grad_clip = 0.0f;
    config.optimizer.adam.lr = 0.0f;
    config.optimizer.adam.beta1 = 0.0f;
    config.schedule.grad_accum = accum;
    config.schedule.grad_accum_dtype = acc_dtype;
    auto layout = Session::prepare(config, model::GptModel::block_numels(cfg), 1).value();
    Run r;
    r.model = model::GptModel::create(*dev, cfg, model::RunShape{B, T, 0}, layout.storage).value();
    EXPECT_TRUE(r.model->init_params(5).ok());
    SessionInputs inputs;
    inputs.init = slices_of([&cfg](int64_t b) { return model::init_block(cfg, b, 5); });
    r.session = Session::create(config, *dev, *one, *r.model, inputs).value();
    return r;
  };
  auto m_of = [](Session& s) {
    std::vector<double> m;
    const OffloadedOptimizer& opt = s.optimizer();
    for (size_t p = 0; p < opt.num_partitions(); ++p) {
      const auto* state = reinterpret_cast<const float*>(opt.host_state(p));
      m.insert(m.end(), state + opt.numel(p), state + 2 * opt.numel(p));
    }
    return m;
  };
  // The reference: each micro-batch's gradient on its own, summed in float64, over K.
  Run single = start(1, DType::kF32);
  std::vector<double> ref;
  for (int k = 0; k < K; ++k) {
    const size_t at = size_t(k * B * T);
    ASSERT_TRUE(single.session->step().run(&tokens[at], &targets[at], k + 1, 1).ok());
    ASSERT_TRUE(single.session->step().flush().ok());
    const std::vector<double> g = m_of(*single.session);
    ref.resize(g.size(), 0.0);
    for (size_t i = 0; i < g.size(); ++i) ref[i] += g[i];
  }
  for (double& r : ref) r /= K;
  auto error = [&ref](const std::vector<double>& m) {
    double d = 0.0, n = 0.0;
    for (size_t i = 0; i < ref.size(); ++i) {
      d += (m[i] - ref[i]) * (m[i] - ref[i]);
      n += ref[i] * ref[i];
    }
    return std::sqrt(d / n);
  };
  double err[2];
  for (int i = 0; i < 2; ++i) {
    Run acc = start(K, i == 0 ? DType::kF32 : DType::kBF16);
    ASSERT_TRUE(acc.session->step().run(tokens.data(), targets.data(), 1, K).ok());
    ASSERT_TRUE(acc.session->step().flush().ok());
    err[i] = error(m_of(*acc.session));
  }
  EXPECT_LT(err[0], 1e-5) << "fp32 accumulation against the float64 sum";
  EXPECT_GT(err[1], 1e-3) << "bf16 accumulation drifts";
  EXPECT_GT(err[1], 100 * err[0]);
  std::printf(
      "relative error of the accumulated gradient over %d micro-batches: fp32 %.2e, "
      "bf16 %.2e\n",
      K, err[0], err[1]);
}

TEST(Session, ReportsAndPredictsWhatAStepWithAPlanHas) {
  auto dev = gpu::create_cpu_device({}).value();
  const model::GptConfig cfg = small_config();
  auto one = comm::create_local_comm();
  int64_t psi = 0;
  for (int64_t n : model::GptModel::block_numels(cfg)) psi += n;
  sched::Rates rates;
  for (double& r : rates.per_second) r = 1e9;
  std::vector<sched::Prediction> pred;
  for (int64_t k : {1, 3}) {
    EngineConfig config;  // stage 0, the optimizer in host RAM, planned
    config.schedule.grad_accum = k;
    auto m = model::GptModel::create(*dev, cfg, model::RunShape{2, 10, 0}).value();
    auto s = Session::create(config, *dev, *one, *m, {}).value();
    const std::optional<ZeroMemory> mem = s->step().memory_report();
    ASSERT_TRUE(mem.has_value());
    EXPECT_EQ(mem->model_state(), 16 * psi);
    EXPECT_TRUE(s->step().traffic_report().has_value());
    auto p = planner::predict(*s, rates);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_GT(p->step_s, 0.0);
    pred.push_back(*p);
  }
  // Three micro-batches: three replays of the compute, one update (and at stage 0 one
  // transfer down, reduction and check, after the last), so less than three single steps.
  using sched::Work;
  EXPECT_DOUBLE_EQ(pred[1].work[int(Work::kFlops)], 3.0 * pred[0].work[int(Work::kFlops)]);
  EXPECT_GT(pred[0].work[int(Work::kAdamElements)], 0.0);
  EXPECT_DOUBLE_EQ(pred[1].work[int(Work::kAdamElements)], pred[0].work[int(Work::kAdamElements)]);
  EXPECT_GT(pred[0].work[int(Work::kD2HBytes)], 0.0);  // the gradients go down after the last
  EXPECT_DOUBLE_EQ(pred[1].work[int(Work::kD2HBytes)], pred[0].work[int(Work::kD2HBytes)]);
  EXPECT_GT(pred[1].step_s, 2.0 * pred[0].step_s);
  EXPECT_LT(pred[1].step_s, 3.0 * pred[0].step_s);
  EngineConfig serial;
  serial.schedule.kind = Schedule::kSerial;
  auto m = model::GptModel::create(*dev, cfg, model::RunShape{2, 10, 0}).value();
  auto s = Session::create(serial, *dev, *one, *m, {}).value();
  EXPECT_FALSE(s->step().memory_report().has_value());
  EXPECT_FALSE(s->step().traffic_report().has_value());
  auto p = planner::predict(*s, rates);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), ErrorCode::kConfig);
}

}  // namespace
}  // namespace strata::engine
