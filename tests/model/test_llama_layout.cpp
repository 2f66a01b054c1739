// Llama checkpoints (model/llama_layout.h):
//   - each block's tensors tile it exactly, with Hugging Face's names and shapes;
//   - a checkpoint strata writes (one file or shards, F32 or BF16, tied or untied) passes an
//     independent standard-library reader of the formats (check_hf_checkpoint.py: names, shapes,
//     index, shard names, total_size) and reads back bit for bit (BF16: the rounded values);
//   - a reader of some blocks maps only the shards that hold them; a reader of a range of a
//     block's elements (a rank's part at stage 3) gets exactly those and maps only the shards of
//     the tensors the range covers;
//   - a missing tensor or a wrong shape is a one-line error naming the file and the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/llama_layout.h"
#include "model/safetensors_write.h"

#ifndef STRATA_TEST_SCRIPTS
#define STRATA_TEST_SCRIPTS "."
#endif

namespace strata::model {
namespace {

namespace fs = std::filesystem;

LlamaConfig small(bool tied) {
  LlamaConfig c;
  c.vocab = 50;
  c.channels = 16;
  c.intermediate = 24;
  c.layers = 3;
  c.heads = 4;
  c.kv_heads = 2;
  c.max_seq = 32;
  c.tied = tied;
  return c;
}

float value(int64_t b, int64_t i) { return 0.001f * static_cast<float>(i % 997) - 0.25f * b; }

BlockSource source_of(const LlamaConfig& c) {
  return [c](int64_t b, float* host) {
    for (int64_t i = 0; i < llama_block_numel(c, b); ++i) host[i] = value(b, i);
    return ok_status();
  };
}

class LlamaLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_llama_layout_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  fs::path dir_;
};

TEST_F(LlamaLayoutTest, BlocksAreTiledByHuggingFacesTensors) {
  for (bool tied : {false, true}) {
    const LlamaConfig c = small(tied);
    std::set<std::string> names;
    for (int64_t b = 0; b <= c.layers; ++b) {
      int64_t at = 0;
      for (const LlamaTensor& t : llama_block_tensors(c, b)) {
        EXPECT_EQ(t.offset, at) << t.name;
        at += numel_of(t.shape);
        names.insert(t.name);
      }
      EXPECT_EQ(at, llama_block_numel(c, b)) << b;
    }
    EXPECT_EQ(names.size(), llama_tensors(c).size());
    EXPECT_EQ(static_cast<int64_t>(names.size()), 9 * c.layers + (tied ? 2 : 3));
    EXPECT_EQ(names.count("model.layers.2.self_attn.k_proj.weight"), 1u);
    EXPECT_EQ(names.count("lm_head.weight"), tied ? 0u : 1u);
  }
  const auto k = llama_block_tensors(small(false), 0)[2];
  EXPECT_EQ(k.name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{8, 16}));  // NKV * HS = 2 * 4
}

TEST_F(LlamaLayoutTest, WrittenCheckpointsPassAnIndependentReaderAndReadBackBitForBit) {
  for (bool tied : {false, true}) {
    for (DType stored : {DType::kF32, DType::kBF16}) {
      for (int64_t shard : {int64_t{1} << 30, int64_t{3000}}) {
        const LlamaConfig c = small(tied);
        const std::string d = path(std::string(tied ? "tied_" : "untied_") +
                                   std::string(dtype_name(stored)) + "_" + std::to_string(shard));
        auto files = write_llama_checkpoint(d, c, stored, shard, source_of(c));
        ASSERT_TRUE(files.ok()) << files.status().to_string();
        EXPECT_EQ(files.value().size() > 2, shard < 4000) << "sharded when the limit is small";
        const std::string check = "python3 " STRATA_TEST_SCRIPTS "/check_hf_checkpoint.py " + d;
        EXPECT_EQ(std::system(check.c_str()), 0) << check;
        auto config = read_hf_llama_config(d);
        ASSERT_TRUE(config.ok()) << config.status().to_string();
        EXPECT_EQ(config.value().describe(), c.describe());  // torch_dtype is not the run's
        auto ck = SafetensorsCheckpoint::open(d);
        ASSERT_TRUE(ck.ok()) << ck.status().to_string();
        int64_t blocks = 0;
        const Status st =
            read_llama_checkpoint(*ck.value(), config.value(), [&](int64_t b, const float* v) {
              ++blocks;
              for (int64_t i = 0; i < llama_block_numel(c, b); ++i) {
                const float want =
                    stored == DType::kF32 ? value(b, i) : bf16_to_f32(f32_to_bf16(value(b, i)));
                if (v[i] != want) {
                  return make_error(ErrorCode::kCorrupt, "block ", b, " element ", i, ": ", v[i],
                                    " != ", want);
                }
              }
              return ok_status();
            });
        EXPECT_TRUE(st.ok()) << st.to_string();
        EXPECT_EQ(blocks, c.layers + 1);
      }
    }
  }
}

TEST_F(LlamaLayoutTest, AReaderOfSomeBlocksMapsOnlyTheirShards) {
  const LlamaConfig c = small(false);
  const std::string d = path("ckpt");
  ASSERT_TRUE(write_llama_checkpoint(d, c, DType::kF32, 1, source_of(c)).ok());  // a tensor each
  auto ck = SafetensorsCheckpoint::open(d);
  ASSERT_TRUE(ck.ok());
  std::vector<bool> wanted(static_cast<size_t>(c.layers + 1), false);
  wanted[1] = true;
  int calls = 0;
  ASSERT_TRUE(read_llama_checkpoint(
                  *ck.value(), c,
                  [&](int64_t b, const float*) {
                    EXPECT_EQ(b, 1);
                    ++calls;
                    return ok_status();
                  },
                  wanted)
                  .ok());
  EXPECT_EQ(calls, 1);
  std::set<std::string> layer1;
  for (const LlamaTensor& t : llama_block_tensors(c, 1)) layer1.insert(ck.value()->file_of(t.name));
  const auto opened = ck.value()->opened();
  EXPECT_EQ(std::set<std::string>(opened.begin(), opened.end()), layer1);
}

TEST_F(LlamaLayoutTest, ARangeOfABlockReadsOnlyItsTensors) {
  const LlamaConfig c = small(false);
  const std::string d = path("ckpt");
  ASSERT_TRUE(write_llama_checkpoint(d, c, DType::kF32, 1, source_of(c)).ok());  // a tensor each
  const std::vector<LlamaTensor> tensors = llama_block_tensors(c, 1);
  ASSERT_GE(tensors.size(), 3u);
  const int64_t n = llama_block_numel(c, 1);
  // Ranges within one tensor, across tensors' edges, the whole block, empty.
  const LlamaTensor& q = tensors[1];
  const std::vector<ElementRange> ranges = {{q.offset + 3, q.offset + 40},
                                            {q.offset - 5, tensors[2].offset + 7},
                                            {0, n},
                                            {n / 3, 2 * n / 3},
                                            {n - 1, n},
                                            {7, 7}};
  for (const ElementRange& r : ranges) {
    auto ck = SafetensorsCheckpoint::open(d);
    ASSERT_TRUE(ck.ok());
    std::vector<float> got(static_cast<size_t>(r.end - r.begin), -1.0f);
    ASSERT_TRUE(read_llama_elements(*ck.value(), c, 1, r, got.data()).ok());
    for (int64_t i = r.begin; i < r.end; ++i) {
      ASSERT_EQ(got[size_t(i - r.begin)], value(1, i)) << "element " << i;
    }
    std::set<std::string> covered;
    for (const LlamaTensor& t : tensors) {
      if (std::max(r.begin, t.offset) < std::min(r.end, t.offset + t.numel())) {
        covered.insert(ck.value()->file_of(t.name));
      }
    }
    const auto opened = ck.value()->opened();
    EXPECT_EQ(std::set<std::string>(opened.begin(), opened.end()), covered)
        << "[" << r.begin << ", " << r.end << ")";
  }
  auto ck = SafetensorsCheckpoint::open(d);
  ASSERT_TRUE(ck.ok());
  float one = 0;
  EXPECT_FALSE(read_llama_elements(*ck.value(), c, 1, {n, n + 1}, &one).ok());
}

TEST_F(LlamaLayoutTest, MissingTensorsAndWrongShapesAreErrorsNamingThem) {
  const LlamaConfig tied = small(true);
  const std::string d = path("ckpt");
  ASSERT_TRUE(write_llama_checkpoint(d, tied, DType::kF32, 1 << 30, source_of(tied)).ok());
  auto ck = SafetensorsCheckpoint::open(d);
  ASSERT_TRUE(ck.ok());
  auto sink = [](int64_t, const float*) { return ok_status(); };
  const Status untied = read_llama_checkpoint(*ck.value(), small(false), sink);
  EXPECT_NE(untied.message().find("no tensor lm_head.weight"), std::string::npos)
      << untied.message();
  LlamaConfig wider = tied;
  wider.intermediate = 32;
  const Status shape = read_llama_checkpoint(*ck.value(), wider, sink);
  EXPECT_NE(shape.message().find("model.safetensors"), std::string::npos) << shape.message();
  EXPECT_NE(shape.message().find("model.layers.0.mlp.gate_proj.weight has shape [24, 16], the "
                                 "model needs [32, 16]"),
            std::string::npos)
      << shape.message();
}

}  // namespace
}  // namespace strata::model
