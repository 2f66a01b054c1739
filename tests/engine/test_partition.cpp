// Partitioning: the communicators' padding rule per block, and the per-rank model-state bytes of
// each ZeRO stage against DESIGN.md §1 (16Ψ, 4Ψ+12Ψ/N, 2Ψ+14Ψ/N, 16Ψ/N).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/partition.h"

namespace strata::engine {
namespace {

TEST(Partitioning, ShardsFollowThePaddingRuleAndCoverTheBlockOnce) {
  const std::vector<int64_t> blocks{10, 7, 3, 1};
  for (int n : {1, 2, 3, 4, 5}) {
    auto p = Partitioning::create(blocks, n, 0);
    ASSERT_TRUE(p.ok());
    for (size_t b = 0; b < blocks.size(); ++b) {
      const BlockPartition& bp = p->block(b);
      EXPECT_EQ(bp.shard_numel, (blocks[b] + n - 1) / n);
      int64_t covered = 0, expect_begin = 0;
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(bp.owned_begin(r), expect_begin) << "block " << b << " rank " << r;
        EXPECT_LE(bp.owned_end(r) - bp.owned_begin(r), bp.shard_numel);
        covered += bp.owned_end(r) - bp.owned_begin(r);
        expect_begin = bp.owned_end(r);
      }
      EXPECT_EQ(covered, blocks[b]) << "block " << b << " over " << n << " ranks";
    }
  }
  // 3 elements over 4 ranks: the last rank owns padding only.
  auto p = Partitioning::create(std::vector<int64_t>{3}, 4, 0);
  EXPECT_EQ(p->block(0).owned_begin(3), p->block(0).owned_end(3));
  EXPECT_EQ(p->padded_numel(), 4);
}

TEST(Partitioning, ModelStateBytesMatchTheZeroFormulas) {
  // GPT-2-small-like blocks: 12 layers of 7,087,872 elements and a shared block.
  std::vector<int64_t> blocks(12, 7087872);
  blocks.push_back(39385344);
  for (int n : {1, 2, 4, 8}) {
    auto p = Partitioning::create(blocks, n, 0);
    ASSERT_TRUE(p.ok());
    const double psi = static_cast<double>(p->numel());
    const double formula[4] = {16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n,
                               16 * psi / n};
    for (int stage = 0; stage <= 3; ++stage) {
      const auto m = p->model_state_bytes(stage);
      ASSERT_TRUE(m.ok());
      const double got = static_cast<double>(m->total());
      EXPECT_NEAR(got / formula[stage], 1.0, 0.05) << "stage " << stage << " N=" << n;
      EXPECT_GE(got, formula[stage]);  // padding only adds
    }
  }
}

TEST(Partitioning, PersistentBlocksKeepWholeParametersAtStageThree) {
  const std::vector<int64_t> blocks{1000, 40};  // the second is below the threshold of 100
  auto p = Partitioning::create(blocks, 4, 100);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->block(0).persistent);
  EXPECT_TRUE(p->block(1).persistent);
  const auto m = p->model_state_bytes(3);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->params16, 2 * (250 + 40));  // a shard of the first, the whole second
  EXPECT_EQ(m->grads16, 2 * (250 + 10));   // gradients sharded either way
  EXPECT_EQ(m->optimizer, 12 * (250 + 10));
}

TEST(Partitioning, BadArgumentsAreRefused) {
  const std::vector<int64_t> ok{10}, empty_block{10, 0};
  EXPECT_EQ(Partitioning::create(ok, 0, 0).status().code(), ErrorCode::kConfig);
  EXPECT_EQ(Partitioning::create(empty_block, 2, 0).status().code(), ErrorCode::kConfig);
  const auto neg = Partitioning::create(ok, 2, -1);
  ASSERT_EQ(neg.status().code(), ErrorCode::kConfig);
  EXPECT_NE(neg.status().message().find("stage3_param_persistence_threshold"), std::string::npos);
  auto p = Partitioning::create(ok, 2, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->model_state_bytes(4).status().code(), ErrorCode::kConfig);
}

}  // namespace
}  // namespace strata::engine
