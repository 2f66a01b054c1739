// LlamaModel: the loss against an independent float64 reference of Hugging Face's Llama
// (llama_reference.h) and every parameter's gradient against float64 finite differences of it,
// with grouped-query attention and multi-head, untied and tied heads; bit-identical gradients
// with and without activation checkpointing; which tensors take weight decay. Built on the
// CpuDevice (test_llama) and on a CUDA GPU (test_llama_gpu, STRATA_TEST_CUDA; skips without one;
// the emulated CUDA runtime in CI).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"  // core/rng.h uses unsigned __int128
#include "core/rng.h"
#pragma GCC diagnostic pop
#include "gpu/device.h"
#include "llama_reference.h"
#include "model/llama.h"
#include "model/llama_layout.h"
#include "tested_device.h"

namespace strata::model {
namespace {

std::unique_ptr<gpu::Device> make_device() {
  gpu::DeviceOptions opts;
  opts.memory_limit_bytes = size_t{1} << 30;
  std::string skip_reason;
  return gpu::test::open_tested_device(opts, skip_reason);
}

LlamaConfig tiny(int64_t kv_heads, bool tied, DType dtype = DType::kF32) {
  LlamaConfig c;
  c.vocab = 23;
  c.channels = 16;
  c.intermediate = 24;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = kv_heads;
  c.max_seq = 8;
  c.rms_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tied = tied;
  c.dtype = dtype;
  return c;
}

// Parameters far from the initialisation (weights of std 0.3, norm weights near 1), so that the
// attention is not uniform and every path carries a sizeable gradient.
std::vector<std::vector<float>> random_params(const LlamaConfig& c, uint64_t seed) {
  std::vector<std::vector<float>> blocks;
  for (int64_t b = 0; b <= c.layers; ++b) {
    std::vector<float> v(static_cast<size_t>(llama_block_numel(c, b)));
    const CounterRng rng(seed, static_cast<uint64_t>(b));
    for (const LlamaTensor& t : llama_block_tensors(c, b)) {
      for (int64_t i = 0; i < t.numel(); ++i) {
        const auto at = static_cast<uint64_t>(t.offset + i);
        v[static_cast<size_t>(t.offset + i)] = t.norm
                                                   ? static_cast<float>(1.0 + 0.2 * rng.normal(at))
                                                   : static_cast<float>(0.3 * rng.normal(at));
      }
    }
    blocks.push_back(std::move(v));
  }
  return blocks;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};
Batch random_batch(const LlamaConfig& c, int64_t n, uint64_t seed) {
  const CounterRng rng(seed, 99);
  Batch b;
  for (int64_t i = 0; i < n; ++i) {
    b.tokens.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(2 * i), 23)));
    b.targets.push_back(i % 7 == 3 ? -1 : static_cast<int32_t>(rng.below(2 * i + 1, c.vocab)));
  }
  return b;
}

void check_against_reference(const LlamaConfig& c) {
  auto dev = make_device();
  if (!dev) GTEST_SKIP() << "no CUDA GPU on this machine";
  const RunShape shape{2, 5, 0};
  auto model = LlamaModel::create(*dev, c, shape).value();
  const auto params = random_params(c, 7);
  for (int64_t b = 0; b <= c.layers; ++b) {
    ASSERT_TRUE(model->upload_params(b, params[static_cast<size_t>(b)].data()).ok());
  }
  const Batch batch = random_batch(c, 10, 3);
  auto loss = model->forward(batch.tokens.data(), batch.targets.data());
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  ASSERT_TRUE(model->backward().ok());
  std::vector<std::vector<double>> ref;
  for (const auto& p : params) ref.emplace_back(p.begin(), p.end());
  const double want = test::llama_reference_loss(c, ref, batch.tokens, batch.targets, 2, 5);
  EXPECT_NEAR(loss.value(), want, 1e-5 * std::abs(want)) << c.describe();
  // Every parameter's gradient against central differences of the float64 loss.
  for (int64_t b = 0; b <= c.layers; ++b) {
    std::vector<float> grad(static_cast<size_t>(llama_block_numel(c, b)));
    ASSERT_TRUE(model->download_grads(b, grad.data()).ok());
    auto& block = ref[static_cast<size_t>(b)];
    double scale = 0;
    std::vector<double> fd(grad.size());
    for (size_t i = 0; i < grad.size(); ++i) {
      const double keep = block[i], h = 1e-5;
      block[i] = keep + h;
      const double up = test::llama_reference_loss(c, ref, batch.tokens, batch.targets, 2, 5);
      block[i] = keep - h;
      const double down = test::llama_reference_loss(c, ref, batch.tokens, batch.targets, 2, 5);
      block[i] = keep;
      fd[i] = (up - down) / (2 * h);
      scale = std::max(scale, std::abs(fd[i]));
    }
    int misses = 0;
    for (size_t i = 0; i < grad.size(); ++i) {
      if (std::abs(grad[i] - fd[i]) > 1e-4 * (std::abs(fd[i]) + scale) && ++misses <= 5) {
        ADD_FAILURE() << c.describe() << " block " << b << " element " << i << ": gradient "
                      << grad[i] << ", finite difference " << fd[i];
      }
    }
    EXPECT_EQ(misses, 0) << "block " << b;
  }
}

TEST(LlamaModel, GroupedQueryUntiedMatchesTheReference) { check_against_reference(tiny(2, false)); }
TEST(LlamaModel, MultiHeadTiedMatchesTheReference) { check_against_reference(tiny(4, true)); }
TEST(LlamaModel, MultiQueryMatchesTheReference) { check_against_reference(tiny(1, false)); }

TEST(LlamaModel, CheckpointingGivesTheSameGradients) {
  auto dev = make_device();
  if (!dev) GTEST_SKIP() << "no CUDA GPU on this machine";
  LlamaConfig c = tiny(2, false, DType::kBF16);
  c.layers = 4;
  const auto params = random_params(c, 11);
  const Batch batch = random_batch(c, 16, 5);
  std::vector<std::vector<float>> grads[2];
  float losses[2] = {0, 0};
  for (int run = 0; run < 2; ++run) {
    auto model = LlamaModel::create(*dev, c, RunShape{2, 8, run == 0 ? 0 : 1}).value();
    for (int64_t b = 0; b <= c.layers; ++b) {
      ASSERT_TRUE(model->upload_params(b, params[static_cast<size_t>(b)].data()).ok());
    }
    losses[run] = model->forward(batch.tokens.data(), batch.targets.data()).value();
    ASSERT_TRUE(model->backward().ok());
    for (int64_t b = 0; b <= c.layers; ++b) {
      std::vector<float> g(static_cast<size_t>(llama_block_numel(c, b)));
      ASSERT_TRUE(model->download_grads(b, g.data()).ok());
      grads[run].push_back(std::move(g));
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
  for (int64_t b = 0; b <= c.layers; ++b) {
    EXPECT_EQ(grads[0][static_cast<size_t>(b)], grads[1][static_cast<size_t>(b)]) << b;
  }
}

TEST(LlamaModel, WeightDecayLeavesOutTheNorms) {
  auto dev = make_device();
  if (!dev) GTEST_SKIP() << "no CUDA GPU on this machine";
  const LlamaConfig c = tiny(2, false);
  auto model = LlamaModel::create(*dev, c, RunShape{1, 4, 0}).value();
  for (int64_t b = 0; b <= c.layers; ++b) {
    const auto all = model->decayed_ranges(b, DecayRule::kAll);
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].end, llama_block_numel(c, b));
    for (DecayRule rule : {DecayRule::kMatrices, DecayRule::kNoBiasNorm}) {
      int64_t decayed = 0;
      for (const auto& r : model->decayed_ranges(b, rule)) decayed += r.end - r.begin;
      const int64_t norms = b == c.layers ? c.channels : 2 * c.channels;
      EXPECT_EQ(decayed, llama_block_numel(c, b) - norms) << b;
    }
  }
}

}  // namespace
}  // namespace strata::model
