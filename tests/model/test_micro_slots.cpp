// Micro-batch slots (model.h; the groundwork of the layer-major order of issue 31): a model with
// K slots run in the segment-major order (every micro-batch through a checkpoint segment before
// the next segment, the heads after the last segment, the backward segment by segment in
// reverse and within a segment micro-batch by micro-batch in order, the embeddings last) gives
// each micro-batch's loss and every block's gradient bit for bit as K micro-batches run one after
// another through a one-slot model, for GPT and Llama (tied and untied), fp32 and bf16,
// checkpoint intervals 1 (layer-major) and 2 and none, with a tied head's gradient kept apart
// until the end in both orders (Model::set_separate_head_grads: the heads of all micro-batches
// come before the first embedding backward). Misuse is refused: a slot out of range, a backward
// of a segment whose activations are another slot's.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"  // core/rng.h uses unsigned __int128
#include "core/rng.h"
#pragma GCC diagnostic pop
#include "gpu/device.h"
#include "model/gpt.h"
#include "model/llama.h"
#include "tested_device.h"

namespace strata::model {
namespace {

constexpr int kMicros = 3;

std::unique_ptr<gpu::Device> make_device() {
  gpu::DeviceOptions opts;
  opts.memory_limit_bytes = size_t{1} << 30;
  std::string skip_reason;
  return gpu::test::open_tested_device(opts, skip_reason);
}

struct Family {
  std::string name;
  std::function<Result<std::unique_ptr<Model>>(gpu::Device&, DType, int64_t interval)> make;
};

Family gpt() {
  return {"gpt",
          [](gpu::Device& dev, DType dt, int64_t interval) -> Result<std::unique_ptr<Model>> {
            GptConfig c;
            c.vocab = 29;
            c.max_seq = 8;
            c.layers = 4;
            c.heads = 2;
            c.channels = 16;
            c.dtype = dt;
            STRATA_ASSIGN_OR_RETURN(auto m, GptModel::create(dev, c, {2, 8, interval}));
            STRATA_RETURN_IF_ERROR(m->init_params(3));
            return std::unique_ptr<Model>(std::move(m));
          }};
}

Family llama(bool tied) {
  return {tied ? "llama-tied" : "llama",
          [tied](gpu::Device& dev, DType dt, int64_t interval) -> Result<std::unique_ptr<Model>> {
            LlamaConfig c;
            c.vocab = 29;
            c.channels = 16;
            c.intermediate = 24;
            c.layers = 4;
            c.heads = 4;
            c.kv_heads = 2;
            c.max_seq = 8;
            c.tied = tied;
            c.dtype = dt;
            STRATA_ASSIGN_OR_RETURN(auto m, LlamaModel::create(dev, c, {2, 8, interval}));
            STRATA_RETURN_IF_ERROR(m->init_params(3));
            return std::unique_ptr<Model>(std::move(m));
          }};
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};
std::vector<Batch> batches(const Model& m) {
  std::vector<Batch> out;
  const int64_t n = m.shape().batch * m.shape().seq;
  for (int k = 0; k < kMicros; ++k) {
    const CounterRng rng(17, static_cast<uint64_t>(k));
    Batch b;
    for (int64_t i = 0; i < n; ++i) {
      const auto v = static_cast<uint64_t>(m.vocab());
      b.tokens.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(2 * i), v)));
      b.targets.push_back(i % 5 == 2 ? -1 : static_cast<int32_t>(rng.below(2 * i + 1, v)));
    }
    out.push_back(std::move(b));
  }
  return out;
}

struct Outcome {
  std::vector<float> losses;                  // by micro-batch
  std::vector<std::vector<float>> gradients;  // by block, summed over the micro-batches
};

Outcome gradients_of(Model& m) {
  Outcome o;
  for (int64_t b = 0; b < m.num_blocks(); ++b) {
    o.gradients.emplace_back(static_cast<size_t>(m.block_numel(b)));
    EXPECT_TRUE(m.download_grads(b, o.gradients.back().data()).ok());
  }
  return o;
}

// The micro-batches one after another (today's order).
Outcome one_after_another(Model& m, const std::vector<Batch>& bs) {
  gpu::Stream& s = m.stream();
  const int64_t L = m.num_layers();
  std::vector<float> losses;
  EXPECT_TRUE(m.set_separate_head_grads(true).ok());
  EXPECT_TRUE(m.zero_grad().ok());
  for (const Batch& b : bs) {
    EXPECT_TRUE(m.set_batch(s, b.tokens.data(), b.targets.data()).ok());
    EXPECT_TRUE(m.embedding_forward(s, m.param_block(L)).ok());
    for (int64_t l = 0; l < L; ++l) EXPECT_TRUE(m.layer_forward(s, l, m.param_block(l)).ok());
    EXPECT_TRUE(m.head_forward(s, m.param_block(L)).ok());
    EXPECT_TRUE(m.head_backward(s, m.param_block(L), m.grad_block(L)).ok());
    for (int64_t seg = m.num_segments() - 1; seg >= 0; --seg) {
      if (seg != m.num_segments() - 1) {
        for (int64_t l = m.segment_begin(seg); l < m.segment_end(seg); ++l) {
          EXPECT_TRUE(m.layer_recompute(s, l, m.param_block(l)).ok());
        }
      }
      for (int64_t l = m.segment_end(seg) - 1; l >= m.segment_begin(seg); --l) {
        EXPECT_TRUE(m.layer_backward(s, l, m.param_block(l), m.grad_block(l)).ok());
      }
    }
    EXPECT_TRUE(m.embedding_backward(s, m.grad_block(L)).ok());
    EXPECT_TRUE(s.synchronize().ok());
    losses.push_back(m.mean_loss());
  }
  EXPECT_TRUE(m.fold_head_grads(s, m.grad_block(L)).ok());
  EXPECT_TRUE(s.synchronize().ok());
  Outcome o = gradients_of(m);
  o.losses = losses;
  return o;
}

// Every micro-batch through a segment before the next (the slots' order).
Outcome segment_major(Model& m, const std::vector<Batch>& bs) {
  gpu::Stream& s = m.stream();
  const int64_t L = m.num_layers();
  const int micros = static_cast<int>(bs.size());
  auto select = [&m](int k) { EXPECT_TRUE(m.select_micro(k).ok()); };
  EXPECT_TRUE(m.set_micro_slots(micros).ok());
  EXPECT_TRUE(m.set_separate_head_grads(true).ok());
  EXPECT_TRUE(m.zero_grad().ok());
  for (int k = 0; k < micros; ++k) {
    select(k);
    EXPECT_TRUE(m.set_batch(s, bs[size_t(k)].tokens.data(), bs[size_t(k)].targets.data()).ok());
    EXPECT_TRUE(m.embedding_forward(s, m.param_block(L)).ok());
  }
  // The forward visits the micro-batches from the last to the first (the forward's order does
  // not change any sum), so the last segment's activations are the first micro-batch's, where
  // the backward starts.
  for (int64_t seg = 0; seg < m.num_segments(); ++seg) {
    for (int k = micros - 1; k >= 0; --k) {
      select(k);
      for (int64_t l = m.segment_begin(seg); l < m.segment_end(seg); ++l) {
        EXPECT_TRUE(m.layer_forward(s, l, m.param_block(l)).ok());
      }
    }
  }
  std::vector<float> losses;
  for (int k = 0; k < micros; ++k) {
    select(k);
    EXPECT_TRUE(m.head_forward(s, m.param_block(L)).ok());
    EXPECT_TRUE(m.head_backward(s, m.param_block(L), m.grad_block(L)).ok());
  }
  for (int64_t seg = m.num_segments() - 1; seg >= 0; --seg) {
    // In micro-batch order, as the gradients add up one micro-batch after another; the first
    // micro-batch's activations of the last segment are resident, the others recompute them.
    for (int k = 0; k < micros; ++k) {
      select(k);
      if (seg != m.num_segments() - 1 || k != 0) {
        for (int64_t l = m.segment_begin(seg); l < m.segment_end(seg); ++l) {
          EXPECT_TRUE(m.layer_recompute(s, l, m.param_block(l)).ok());
        }
      }
      for (int64_t l = m.segment_end(seg) - 1; l >= m.segment_begin(seg); --l) {
        EXPECT_TRUE(m.layer_backward(s, l, m.param_block(l), m.grad_block(l)).ok());
      }
    }
  }
  for (int k = 0; k < micros; ++k) {
    select(k);
    EXPECT_TRUE(m.embedding_backward(s, m.grad_block(L)).ok());
  }
  EXPECT_TRUE(m.fold_head_grads(s, m.grad_block(L)).ok());
  EXPECT_TRUE(s.synchronize().ok());
  for (int k = 0; k < micros; ++k) {
    select(k);
    losses.push_back(m.mean_loss());
  }
  Outcome o = gradients_of(m);
  o.losses = losses;
  return o;
}

struct Case {
  Family family;
  DType dtype;
  int64_t interval;  // 0: no checkpointing
};

class MicroSlotsTest : public ::testing::TestWithParam<Case> {};

TEST_P(MicroSlotsTest, SegmentMajorGivesTheBitsOfOneMicroBatchAfterAnother) {
  const Case& c = GetParam();
  auto dev = make_device();
  if (!dev) GTEST_SKIP() << "no device";
  auto a = c.family.make(*dev, c.dtype, c.interval);
  auto b = c.family.make(*dev, c.dtype, c.interval);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const std::vector<Batch> bs = batches(**a);
  const Outcome want = one_after_another(**a, bs);
  const Outcome got = segment_major(**b, bs);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t k = 0; k < want.losses.size(); ++k) {
    EXPECT_GT(want.losses[k], 0.0f);
    EXPECT_EQ(got.losses[k], want.losses[k]) << "micro-batch " << k;
  }
  const int64_t L = (*a)->num_layers();
  for (int64_t blk = 0; blk <= L; ++blk) {
    const std::vector<float>& w = want.gradients[size_t(blk)];
    const std::vector<float>& g = got.gradients[size_t(blk)];
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_EQ(g[i], w[i]) << "block " << blk << " element " << i;
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const Family& f : {gpt(), llama(false), llama(true)}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (int64_t interval : {1, 2, 0}) out.push_back({f, dt, interval});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Families, MicroSlotsTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return i.param.family.name == "llama-tied"
                                      ? "llama_tied_" + std::string(dtype_name(i.param.dtype)) +
                                            "_k" + std::to_string(i.param.interval)
                                      : i.param.family.name + "_" +
                                            std::string(dtype_name(i.param.dtype)) + "_k" +
                                            std::to_string(i.param.interval);
                         });

TEST(MicroSlots, MisuseIsRefused) {
  auto dev = make_device();
  if (!dev) GTEST_SKIP() << "no device";
  auto m = llama(false).make(*dev, DType::kF32, 2);
  ASSERT_TRUE(m.ok());
  Model& model = **m;
  EXPECT_EQ(model.micro_slots(), 1);
  EXPECT_FALSE(model.select_micro(1).ok());
  EXPECT_FALSE(model.set_micro_slots(0).ok());
  const size_t before = model.device_bytes();
  ASSERT_TRUE(model.set_micro_slots(2).ok());
  EXPECT_GT(model.device_bytes(), before);
  EXPECT_FALSE(model.select_micro(2).ok());
  // Slot 1 runs the last segment; slot 0's backward there needs its own recompute first.
  const std::vector<Batch> bs = batches(model);
  gpu::Stream& s = model.stream();
  const int64_t L = model.num_layers();
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(model.select_micro(k).ok());
    ASSERT_TRUE(model.set_batch(s, bs[size_t(k)].tokens.data(), bs[size_t(k)].targets.data()).ok());
    ASSERT_TRUE(model.embedding_forward(s, model.param_block(L)).ok());
    for (int64_t l = 0; l < L; ++l)
      ASSERT_TRUE(model.layer_forward(s, l, model.param_block(l)).ok());
  }
  ASSERT_TRUE(model.select_micro(0).ok());
  ASSERT_TRUE(model.head_forward(s, model.param_block(L)).ok());
  ASSERT_TRUE(model.head_backward(s, model.param_block(L), model.grad_block(L)).ok());
  const Status st =
      model.layer_backward(s, L - 1, model.param_block(L - 1), model.grad_block(L - 1));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("slot"), std::string::npos) << st.to_string();
  ASSERT_TRUE(s.synchronize().ok());
  ASSERT_TRUE(model.set_micro_slots(1).ok());
  EXPECT_EQ(model.device_bytes(), before);
}

}  // namespace
}  // namespace strata::model
