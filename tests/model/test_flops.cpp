// One MFU definition (model/flops.h, gpu/peak_flops.h), computed by hand: GPT-2 124M as llm.c
// counts it (124,475,904 parameters with the padded vocabulary) at T 1024 needs
// 6·124475904 + 6·12·768·1024 = 746,855,424 + 56,623,104 = 803,478,528 FLOPs a token; the
// datasheet peaks by device name, none for the CpuDevice or fp32.
#include <gtest/gtest.h>

#include "gpu/peak_flops.h"
#include "model/config.h"
#include "model/flops.h"

namespace strata {
namespace {

TEST(Mfu, Gpt2SmallFlopsPerTokenByHand) {
  model::GptConfig c;
  c.vocab = 50257;
  c.padded_vocab = 50304;
  c.max_seq = 1024;
  c.layers = 12;
  c.heads = 12;
  c.channels = 768;
  ASSERT_EQ(c.num_params(), 124475904);
  EXPECT_EQ(model::training_flops_per_token(c.num_params(), 12, 768, 1024), 803478528.0);
  // At 1 s a step of 8 sequences: 8192 tokens, 6.58 TFLOP; on an H100 SXM 0.665% MFU.
  const double mfu = 8192.0 * model::training_flops_per_token(c.num_params(), 12, 768, 1024) /
                     gpu::datasheet_peak_flops("NVIDIA H100 80GB HBM3 (sm_90)", DType::kBF16);
  EXPECT_NEAR(mfu, 8192.0 * 803478528.0 / 989e12, 1e-15);
}

TEST(Mfu, DatasheetPeaksByName) {
  EXPECT_EQ(gpu::datasheet_peak_flops("NVIDIA H100 80GB HBM3 (sm_90)", DType::kBF16), 989e12);
  EXPECT_EQ(gpu::datasheet_peak_flops("NVIDIA H200 (sm_90)", DType::kF16), 989e12);
  EXPECT_EQ(gpu::datasheet_memory_bandwidth("NVIDIA H100 80GB HBM3 (sm_90)"), 3.35e12);
  EXPECT_EQ(gpu::datasheet_memory_bandwidth("NVIDIA H100 PCIe (sm_90)"), 2.0e12);
  EXPECT_EQ(gpu::datasheet_memory_bandwidth("NVIDIA H200 (sm_90)"), 4.8e12);
  EXPECT_EQ(gpu::datasheet_memory_bandwidth("NVIDIA GH200 480GB (sm_90)"), 4.0e12);
  EXPECT_EQ(gpu::datasheet_memory_bandwidth("cpu (2 threads)"), 0.0);
  EXPECT_EQ(gpu::datasheet_peak_flops("NVIDIA GH200 480GB (sm_90)", DType::kBF16), 989e12);
  EXPECT_EQ(gpu::datasheet_peak_flops("NVIDIA H100 PCIe (sm_90)", DType::kBF16), 756e12);
  EXPECT_EQ(gpu::datasheet_peak_flops("NVIDIA A100-SXM4-80GB (sm_80)", DType::kBF16), 312e12);
  EXPECT_EQ(gpu::datasheet_peak_flops("NVIDIA H100 80GB HBM3 (sm_90)", DType::kF32), 0.0);
  EXPECT_EQ(gpu::datasheet_peak_flops("cpu (2 threads)", DType::kBF16), 0.0);
  EXPECT_EQ(gpu::datasheet_peak_flops("NVIDIA L4 (sm_89)", DType::kBF16), 0.0);
}

}  // namespace
}  // namespace strata
