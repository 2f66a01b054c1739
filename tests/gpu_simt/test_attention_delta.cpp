// The tensor-core attention backward with D = dout . out kept in the stream's scratch and with D
// computed again in both kernels (the path of B * NH * T > kStreamScratchFloats, which is too
// large for the emulator, chosen here by a null scratch) gives the same bits: both come from
// quad_delta. At head sizes 64 and 128, bf16 and fp16, grouped-query heads, a partial last tile.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/cuda/launch.h"
#include "simt.h"

namespace strata::gpu::cuda {
namespace {

// 16-bit words of values in [-1, 1): the high half of a float (bf16) or a half built by hand.
std::vector<uint16_t> random_words(size_t n, ElemType t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> w(n);
  for (auto& x : w) {
    const float f = u(rng);
    if (t == ElemType::kBF16) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      x = static_cast<uint16_t>(bits >> 16);
    } else {  // sign, exponent 14 (0.5 .. 1), 10 random mantissa bits
      x = static_cast<uint16_t>((f < 0 ? 0x8000u : 0u) | (14u << 10) | (rng() & 0x3ffu));
    }
  }
  return w;
}

TEST(AttentionBackwardTc, DComputedAgainGivesTheBitsOfDKeptInTheScratch) {
  const int64_t B = 2, T = 77, NH = 4, NKV = 2;
  for (const ElemType t : {ElemType::kBF16, ElemType::kF16}) {
    for (const int64_t hs : {int64_t{64}, int64_t{128}}) {
      SCOPED_TRACE(::testing::Message() << "hs " << hs << (t == ElemType::kF16 ? " f16" : " bf16"));
      const int64_t C = NH * hs, width = C + 2 * NKV * hs;
      const auto qkv = random_words(size_t(B * T * width), t, 1);
      const auto dout = random_words(size_t(B * T * C), t, 2);
      std::vector<uint16_t> out(size_t(B * T * C));
      std::vector<float> lse(size_t(B * NH * T));
      ASSERT_EQ(launch_attention_forward_tc(nullptr, out.data(), lse.data(), qkv.data(), B, T, C,
                                            NH, NKV, t),
                cudaSuccess)
          << simt::take_last_message();
      std::vector<float> scratch(size_t(kStreamScratchFloats), -1.0f);
      std::vector<uint16_t> kept(qkv.size(), 0), again(qkv.size(), 0);
      ASSERT_EQ(
          launch_attention_backward_tc(nullptr, kept.data(), dout.data(), qkv.data(), out.data(),
                                       lse.data(), B, T, C, NH, NKV, t, scratch.data()),
          cudaSuccess)
          << simt::take_last_message();
      EXPECT_NE(scratch[0], -1.0f) << "D was not kept in the scratch";
      ASSERT_EQ(launch_attention_backward_tc(nullptr, again.data(), dout.data(), qkv.data(),
                                             out.data(), lse.data(), B, T, C, NH, NKV, t, nullptr),
                cudaSuccess)
          << simt::take_last_message();
      const uint16_t exponent = t == ElemType::kBF16 ? 0x7f80u : 0x7c00u;  // all ones: Inf, NaN
      size_t nonzero = 0, finite = 0, differ = 0;
      for (size_t i = 0; i < kept.size(); ++i) {
        nonzero += (kept[i] & 0x7fffu) != 0;
        finite += (kept[i] & exponent) != exponent;
        differ += kept[i] != again[i];
      }
      EXPECT_GT(nonzero, kept.size() / 2);
      EXPECT_EQ(finite, kept.size());
      EXPECT_EQ(differ, 0u);
    }
  }
}

}  // namespace
}  // namespace strata::gpu::cuda
