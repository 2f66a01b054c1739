// GptModel: whole-model gradient check against float64 finite differences of an independent
// reference forward, bit-identical gradients with and without activation checkpointing, and
// out-of-memory at allocation. Built three times: on the CpuDevice (test_gpt), on the CUDA
// kernels run by the SIMT emulator (test_gpt_simt, STRATA_TEST_SIMT) and on a CUDA GPU
// (test_gpt_gpu, STRATA_TEST_CUDA; skips without one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"  // core/rng.h uses unsigned __int128
#include "core/rng.h"
#pragma GCC diagnostic pop
#include "gpt_reference.h"
#include "gpu/device.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "tested_device.h"

namespace strata::model {
namespace {
using testing::reference_loss;

// The device under test (tested_device.h); null when there is none to test.
std::unique_ptr<gpu::Device> make_device(size_t limit_bytes = 0) {
  gpu::DeviceOptions opts;
  opts.memory_limit_bytes = limit_bytes == 0 ? size_t{1} << 30 : limit_bytes;
  std::string skip_reason;
  return gpu::test::open_tested_device(opts, skip_reason);
}
#define OPEN_DEVICE_OR_SKIP(dev, ...)  \
  auto dev = make_device(__VA_ARGS__); \
  if (!dev) GTEST_SKIP() << "no CUDA GPU on this machine"

GptConfig tiny_config(DType dtype = DType::kF32) {
  GptConfig cfg;
  cfg.vocab = 13;
  cfg.padded_vocab = 16;
  cfg.max_seq = 8;
  cfg.layers = 2;
  cfg.heads = 2;
  cfg.channels = 16;
  cfg.dtype = dtype;
  return cfg;
}

// Parameters far from the GPT-2 init (std 0.3 weights, layernorm weights near 1) so that the
// attention is not uniform and every path carries a sizeable gradient.
std::vector<std::vector<float>> random_params(const GptConfig& cfg, uint64_t seed) {
  std::vector<std::vector<float>> blocks;
  for (int64_t b = 0; b <= cfg.layers; ++b) {
    TensorSpan spans[12];
    const int count = b == cfg.layers ? shared_tensors(cfg, spans) : layer_tensors(cfg, spans);
    std::vector<float> v(static_cast<size_t>(spans[count - 1].offset + spans[count - 1].numel));
    const CounterRng rng(seed, static_cast<uint64_t>(b));
    for (int i = 0; i < count; ++i) {
      const bool ln_weight = std::strstr(spans[i].name, "ln") == spans[i].name &&
                             spans[i].name[std::strlen(spans[i].name) - 1] == 'w';
      for (int64_t k = 0; k < spans[i].numel; ++k) {
        const auto idx = static_cast<uint64_t>(spans[i].offset + k);
        v[static_cast<size_t>(spans[i].offset + k)] =
            static_cast<float>((ln_weight ? 1.0 : 0.0) + 0.3 * rng.normal(idx));
      }
    }
    blocks.push_back(std::move(v));
  }
  return blocks;
}

void make_data(const GptConfig& cfg, int64_t n, uint64_t seed, std::vector<int32_t>& tokens,
               std::vector<int32_t>& targets) {
  const CounterRng rng(seed, 99);
  tokens.resize(static_cast<size_t>(n));
  targets.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>(
        rng.below(static_cast<uint64_t>(2 * i), static_cast<uint64_t>(cfg.vocab)));
    const auto t = static_cast<int32_t>(
        rng.below(static_cast<uint64_t>(2 * i + 1), static_cast<uint64_t>(cfg.vocab + 3)));
    targets[static_cast<size_t>(i)] = t >= cfg.vocab ? -1 : t;  // some ignored rows
  }
}

TEST(GptModel, GradientMatchesFiniteDifferencesOfFloat64Reference) {
  OPEN_DEVICE_OR_SKIP(dev);
  const GptConfig cfg = tiny_config();
  RunShape shape{2, 6, 0};  // T=6 < maxT=8: the last wpe rows get no gradient
  auto model_r = GptModel::create(*dev, cfg, shape);
  ASSERT_TRUE(model_r.ok()) << model_r.status().to_string();
  GptModel& model = *model_r.value();
  const auto params = random_params(cfg, 7);
  for (int64_t b = 0; b < model.num_blocks(); ++b) {
    ASSERT_TRUE(model.upload_params(b, params[static_cast<size_t>(b)].data()).ok());
  }
  std::vector<int32_t> tokens, targets;
  make_data(cfg, shape.batch * shape.seq, 3, tokens, targets);
  auto loss = model.forward(tokens.data(), targets.data());
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  ASSERT_TRUE(model.backward().ok());

  std::vector<std::vector<double>> ref(params.size());
  for (size_t b = 0; b < params.size(); ++b) ref[b].assign(params[b].begin(), params[b].end());
  const double ref_loss = reference_loss(cfg, ref, tokens, targets, shape.batch, shape.seq);
  // fp32 forward vs float64 reference of the same parameters.
  EXPECT_NEAR(loss.value(), ref_loss, 1e-5 * std::abs(ref_loss) + 1e-6);

  const CounterRng pick(11);
  int checked = 0;
  double worst = 0.0;
  for (int64_t b = 0; b < model.num_blocks(); ++b) {
    std::vector<float> grad(static_cast<size_t>(model.block_numel(b)));
    ASSERT_TRUE(model.download_grads(b, grad.data()).ok());
    TensorSpan spans[12];
    const int count = b == cfg.layers ? shared_tensors(cfg, spans) : layer_tensors(cfg, spans);
    for (int i = 0; i < count; ++i) {
      for (int s = 0; s < 4; ++s) {  // 4 sampled elements of every tensor
        const auto ctr = static_cast<uint64_t>(b * 1000 + i * 10 + s);
        const int64_t off = spans[i].offset + static_cast<int64_t>(pick.below(
                                                  ctr, static_cast<uint64_t>(spans[i].numel)));
        auto& x = ref[static_cast<size_t>(b)][static_cast<size_t>(off)];
        const double saved = x;
        const double h = 1e-5;
        x = saved + h;
        const double lp = reference_loss(cfg, ref, tokens, targets, shape.batch, shape.seq);
        x = saved - h;
        const double lm = reference_loss(cfg, ref, tokens, targets, shape.batch, shape.seq);
        x = saved;
        const double fd = (lp - lm) / (2 * h);
        const double g = grad[static_cast<size_t>(off)];
        // fp32 backward vs float64 central difference (truncation ~h^2, rounding ~1e-16/h):
        // relative error 1e-3 with an absolute floor of 1e-6 for near-zero gradients.
        const double err = std::abs(g - fd);
        EXPECT_LE(err, 1e-3 * std::abs(fd) + 1e-6)
            << "block " << b << " tensor " << spans[i].name << " offset " << off << ": analytic "
            << g << " vs finite difference " << fd;
        worst = std::max(worst, err / (std::abs(fd) + 1e-6));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * (12 * cfg.layers + 4));
  std::printf("checked %d gradients, worst relative error %.3g\n", checked, worst);
}

// Gradients and loss for checkpoint interval k, as raw bytes per block.
std::vector<std::vector<char>> grads_with_interval(gpu::Device& dev, const GptConfig& cfg,
                                                   int64_t k, float* loss_out) {
  RunShape shape{3, 8, k};
  auto model_r = GptModel::create(dev, cfg, shape);
  EXPECT_TRUE(model_r.ok()) << model_r.status().to_string();
  GptModel& model = *model_r.value();
  const auto params = random_params(cfg, 21);
  for (int64_t b = 0; b < model.num_blocks(); ++b) {
    EXPECT_TRUE(model.upload_params(b, params[static_cast<size_t>(b)].data()).ok());
  }
  std::vector<int32_t> tokens, targets;
  make_data(cfg, shape.batch * shape.seq, 5, tokens, targets);
  // Two micro-batches accumulated, so the recompute also runs after a first backward.
  for (int rep = 0; rep < 2; ++rep) {
    auto loss = model.forward(tokens.data(), targets.data());
    EXPECT_TRUE(loss.ok());
    *loss_out = loss.value();
    EXPECT_TRUE(model.backward().ok());
  }
  std::vector<std::vector<char>> out;
  for (int64_t b = 0; b < model.num_blocks(); ++b) {
    const size_t bytes = static_cast<size_t>(model.block_numel(b)) * dtype_size(cfg.dtype);
    std::vector<char> raw(bytes);
    EXPECT_TRUE(model.stream()
                    .copy_now(raw.data(), model.grad_block(b), bytes, gpu::CopyKind::kDeviceToHost)
                    .ok());
    EXPECT_TRUE(model.stream().synchronize().ok());
    out.push_back(std::move(raw));
  }
  return out;
}

TEST(GptModel, CheckpointingGivesBitIdenticalGradients) {
  OPEN_DEVICE_OR_SKIP(dev);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    GptConfig cfg = tiny_config(dt);
    cfg.layers = 5;
    float loss_off = 0.0f;
    const auto off = grads_with_interval(*dev, cfg, 0, &loss_off);
    for (int64_t k : {1, 2, 3, 4}) {
      float loss_on = 0.0f;
      const auto on = grads_with_interval(*dev, cfg, k, &loss_on);
      EXPECT_EQ(std::memcmp(&loss_on, &loss_off, sizeof(float)), 0) << "K=" << k;
      ASSERT_EQ(on.size(), off.size());
      for (size_t b = 0; b < on.size(); ++b) {
        EXPECT_EQ(on[b], off[b]) << dtype_name(dt) << " K=" << k << " block " << b;
      }
    }
  }
}

// The same two micro-batches as grads_with_interval, driven through the per-layer entry points
// on a stream of the caller, with parameter and gradient blocks the caller allocated. The model's
// own blocks hold other values, so reading them instead of the caller's would change the bits.
std::vector<std::vector<char>> grads_via_entry_points(gpu::Device& dev, const GptConfig& cfg,
                                                      int64_t k, float* loss_out) {
  RunShape shape{3, 8, k};
  auto model_r = GptModel::create(dev, cfg, shape);
  EXPECT_TRUE(model_r.ok()) << model_r.status().to_string();
  GptModel& model = *model_r.value();
  EXPECT_TRUE(model.init_params(999).ok());
  auto stream_r = dev.create_stream();
  EXPECT_TRUE(stream_r.ok());
  gpu::Stream& s = *stream_r.value();
  const auto params = random_params(cfg, 21);
  std::vector<gpu::DeviceBuffer> p, g;
  for (int64_t b = 0; b < model.num_blocks(); ++b) {
    const size_t bytes = static_cast<size_t>(model.block_numel(b)) * dtype_size(cfg.dtype);
    std::vector<char> raw(bytes);
    convert(params[static_cast<size_t>(b)].data(), DType::kF32, raw.data(), cfg.dtype,
            static_cast<size_t>(model.block_numel(b)));
    auto pb = dev.allocate(bytes);
    auto gb = dev.allocate(bytes);
    EXPECT_TRUE(pb.ok() && gb.ok());
    EXPECT_TRUE(s.copy_now(pb->data(), raw.data(), bytes, gpu::CopyKind::kHostToDevice).ok());
    EXPECT_TRUE(s.memset(gb->data(), 0, bytes).ok());
    EXPECT_TRUE(s.synchronize().ok());
    p.push_back(std::move(pb).value());
    g.push_back(std::move(gb).value());
  }
  std::vector<int32_t> tokens, targets;
  make_data(cfg, shape.batch * shape.seq, 5, tokens, targets);
  const int64_t L = cfg.layers;
  for (int rep = 0; rep < 2; ++rep) {
    EXPECT_TRUE(model.set_batch(s, tokens.data(), targets.data()).ok());
    EXPECT_TRUE(model.embedding_forward(s, p[L].data()).ok());
    for (int64_t l = 0; l < L; ++l) EXPECT_TRUE(model.layer_forward(s, l, p[l].data()).ok());
    EXPECT_TRUE(model.head_forward(s, p[L].data()).ok());
    EXPECT_TRUE(model.head_backward(s, p[L].data(), g[L].data()).ok());
    for (int64_t seg = model.num_segments() - 1; seg >= 0; --seg) {
      if (seg != model.num_segments() - 1) {
        for (int64_t l = model.segment_begin(seg); l < model.segment_end(seg); ++l) {
          EXPECT_TRUE(model.layer_recompute(s, l, p[l].data()).ok());
        }
      }
      for (int64_t l = model.segment_end(seg) - 1; l >= model.segment_begin(seg); --l) {
        EXPECT_TRUE(model.layer_backward(s, l, p[l].data(), g[l].data()).ok());
      }
    }
    EXPECT_TRUE(model.embedding_backward(s, g[L].data()).ok());
    EXPECT_TRUE(s.synchronize().ok());
    *loss_out = model.mean_loss();
  }
  std::vector<std::vector<char>> out;
  for (int64_t b = 0; b < model.num_blocks(); ++b) {
    std::vector<char> raw(g[b].size_bytes());
    EXPECT_TRUE(s.copy_now(raw.data(), g[b].data(), raw.size(), gpu::CopyKind::kDeviceToHost).ok());
    EXPECT_TRUE(s.synchronize().ok());
    out.push_back(std::move(raw));
  }
  return out;
}

TEST(GptModel, EntryPointsOnCallerBuffersGiveTheBitsOfForwardBackward) {
  OPEN_DEVICE_OR_SKIP(dev);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    GptConfig cfg = tiny_config(dt);
    cfg.layers = 5;
    for (int64_t k : {0, 2}) {
      float loss_whole = 0.0f, loss_entry = 0.0f;
      const auto whole = grads_with_interval(*dev, cfg, k, &loss_whole);
      const auto entry = grads_via_entry_points(*dev, cfg, k, &loss_entry);
      EXPECT_EQ(std::memcmp(&loss_whole, &loss_entry, sizeof(float)), 0) << "K=" << k;
      ASSERT_EQ(whole.size(), entry.size());
      for (size_t b = 0; b < whole.size(); ++b) {
        EXPECT_EQ(whole[b], entry[b]) << dtype_name(dt) << " K=" << k << " block " << b;
      }
    }
  }
}

TEST(GptModel, LayerBackwardBeforeRecomputeIsRefused) {
  OPEN_DEVICE_OR_SKIP(dev);
  GptConfig cfg = tiny_config();
  cfg.layers = 4;
  auto model_r = GptModel::create(*dev, cfg, RunShape{1, 8, 2});
  ASSERT_TRUE(model_r.ok());
  GptModel& m = *model_r.value();
  std::vector<int32_t> tokens, targets;
  make_data(cfg, 8, 5, tokens, targets);
  ASSERT_TRUE(m.forward(tokens.data(), targets.data()).ok());
  ASSERT_TRUE(m.head_backward(m.stream(), m.param_block(4), m.grad_block(4)).ok());
  EXPECT_TRUE(m.layer_backward(m.stream(), 3, m.param_block(3), m.grad_block(3)).ok());
  const Status st = m.layer_backward(m.stream(), 1, m.param_block(1), m.grad_block(1));
  EXPECT_EQ(st.code(), ErrorCode::kConfig) << st.to_string();
  EXPECT_EQ(m.layer_forward(m.stream(), 4, m.param_block(0)).code(), ErrorCode::kConfig);
  EXPECT_TRUE(m.stream().synchronize().ok());
}

TEST(GptModel, BlockCostFollowsTheLayerFormulas) {
  OPEN_DEVICE_OR_SKIP(dev);
  const GptConfig cfg = tiny_config(DType::kBF16);
  auto model_r = GptModel::create(*dev, cfg, RunShape{3, 8, 0});
  ASSERT_TRUE(model_r.ok());
  const double n = 3 * 8, c = 16, t = 8;
  const auto layer = model_r.value()->block_cost(0);
  EXPECT_DOUBLE_EQ(layer.forward_flops, 24 * n * c * c + 2 * n * t * c);
  EXPECT_DOUBLE_EQ(layer.backward_flops, 2 * layer.forward_flops);
  EXPECT_EQ(layer.param_bytes, 2 * (12 * 16 * 16 + 13 * 16));
  EXPECT_EQ(layer.checkpoint_bytes, 2 * 24 * 16);
  const auto shared = model_r.value()->block_cost(cfg.layers);
  EXPECT_DOUBLE_EQ(shared.forward_flops, 2 * n * 16 * c);  // Vp = 16
  EXPECT_EQ(shared.param_bytes, 2 * shared_layout(cfg).numel);
}

TEST(GptModel, CheckpointingReducesActivationMemory) {
  OPEN_DEVICE_OR_SKIP(dev);
  GptConfig cfg = tiny_config();
  cfg.layers = 8;
  auto off = GptModel::create(*dev, cfg, RunShape{4, 8, 0});
  auto on = GptModel::create(*dev, cfg, RunShape{4, 8, 2});
  ASSERT_TRUE(off.ok() && on.ok());
  EXPECT_LT(on.value()->device_bytes(), off.value()->device_bytes());
}

TEST(GptModel, OverTheDeviceCapFailsWithOutOfMemory) {
  OPEN_DEVICE_OR_SKIP(dev, size_t{4} << 20);  // 4 MiB cap
  GptConfig cfg = tiny_config();
  cfg.channels = 256;
  cfg.heads = 4;
  cfg.layers = 4;  // ~3.2M params: 12.6 MB of fp32 parameters alone
  auto model = GptModel::create(*dev, cfg, RunShape{1, 8, 0});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), ErrorCode::kOutOfMemory) << model.status().to_string();
  EXPECT_EQ(dev->memory_info().used_bytes, 0u);  // everything allocated was given back
}

TEST(GptModel, RejectsBadConfigAndTokens) {
  OPEN_DEVICE_OR_SKIP(dev);
  GptConfig cfg = tiny_config();
  cfg.heads = 3;  // does not divide 16
  auto bad = GptModel::create(*dev, cfg, RunShape{1, 8, 0});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kConfig);
  EXPECT_NE(bad.status().message().find("heads"), std::string::npos);
  cfg = tiny_config();
  auto too_long = GptModel::create(*dev, cfg, RunShape{1, 9, 0});
  EXPECT_EQ(too_long.status().code(), ErrorCode::kConfig);
  auto model = GptModel::create(*dev, cfg, RunShape{1, 4, 0});
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> tokens{1, 2, 13, 0};  // 13 is not below vocab 13
  EXPECT_EQ(model.value()->forward(tokens.data(), nullptr).status().code(), ErrorCode::kConfig);
  EXPECT_EQ(model.value()->backward().code(), ErrorCode::kConfig);  // no forward with targets
}

TEST(GptModel, ParameterCountMatchesLayout) {
  const GptConfig cfg = tiny_config();
  const int64_t c = cfg.channels;
  EXPECT_EQ(layer_layout(cfg).numel, 12 * c * c + 13 * c);
  EXPECT_EQ(shared_layout(cfg).numel, cfg.vp() * c + cfg.max_seq * c + 2 * c);
  EXPECT_EQ(cfg.num_params(), cfg.layers * layer_layout(cfg).numel + shared_layout(cfg).numel);
}

}  // namespace
}  // namespace strata::model
