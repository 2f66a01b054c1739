// The CUDA backend's launch shapes, as host arithmetic: layernorm_backward's parameter gradients
// are split into row chunks so that a GPT-2 step's LayerNorms fill an H200 (132 SMs) instead of
// launching C/32 blocks, within the stream's scratch, and as one chunk when the rows are few (and
// bias_backward's column sums the same way);
// embedding_backward's sorted keys fit the stream's scratch.
#include <gtest/gtest.h>

#include <cstdint>

#include "gpu/cuda/launch.h"

namespace strata::gpu::cuda {
namespace {

constexpr int64_t kSms = 132;

TEST(LaunchShapes, LayernormParameterGradientsFillTheGpu) {
  // GPT-2 small at B=4, T=1024: 24 column blocks alone.
  const int64_t columns = 768 / 32;
  const int chunks = layernorm_param_chunks(4 * 1024, 768);
  EXPECT_GE(chunks * columns, 2 * kSms) << chunks << " chunks";
  EXPECT_LE(2 * chunks * 768, kStreamScratchFloats);
  // Few rows: at least 16 rows a chunk.
  EXPECT_EQ(layernorm_param_chunks(11, 37), 1);
  EXPECT_EQ(layernorm_param_chunks(70, 200), 5);
  // Wide layers: bounded by the scratch.
  const int wide = layernorm_param_chunks(int64_t{1} << 20, 12288);
  EXPECT_GE(wide, 1);
  EXPECT_LE(2 * wide * 12288, kStreamScratchFloats);
}

// bias_backward likewise: a GPT-2 small linear's bias (C = 768 columns, 24 blocks alone) in row
// chunks that fill the GPU, one chunk for few rows, within the scratch for wide layers.
TEST(LaunchShapes, BiasGradientsFillTheGpu) {
  const int chunks = bias_backward_chunks(8 * 1024, 768);
  EXPECT_GE(chunks * (768 / 32), 2 * kSms) << chunks << " chunks";
  EXPECT_LE(chunks * 768, kStreamScratchFloats);
  EXPECT_EQ(bias_backward_chunks(11, 37), 1);
  EXPECT_EQ(bias_backward_chunks(70, 200), 5);
  EXPECT_EQ(bias_backward_chunks(8 * 1024, 25600), 1);  // 800 column blocks fill it alone
  const int wide = bias_backward_chunks(int64_t{1} << 20, 100000);
  EXPECT_GE(wide, 1);
  EXPECT_LE(wide * 100000, kStreamScratchFloats);
}

// embedding_backward sorts B*T keys padded to a power of two in the stream's scratch: enough for
// llm.c's largest GPT-2 micro-batch (B=64, T=1024) and more.
TEST(LaunchShapes, EmbeddingBackwardSortsInTheStreamScratch) {
  EXPECT_EQ(embedding_sort_length(1), 1);
  EXPECT_EQ(embedding_sort_length(27), 32);
  EXPECT_EQ(embedding_sort_length(512), 512);
  EXPECT_EQ(embedding_sort_length(513), 1024);
  EXPECT_GE(kMaxEmbeddingPositions, 512 * 1024);
  EXPECT_LE(embedding_sort_length(kMaxEmbeddingPositions) * 8, kStreamScratchFloats * 4);
}

}  // namespace
}  // namespace strata::gpu::cuda
