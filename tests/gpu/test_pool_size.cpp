// gpu/pool_size.h: the default CUDA pool, worked out by hand for one rank and for ranks that
// share a GPU, starting together (each sees what the others have not taken yet).
#include <gtest/gtest.h>

#include <cstddef>

#include "gpu/pool_size.h"

namespace strata::gpu {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

TEST(PoolSize, AloneTheFreeMemoryLessOneGiB) {
  auto p = default_pool_bytes(100 * kGiB, 141 * kGiB, 1, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, 99 * kGiB);
}

// Two ranks on a 141 GiB GPU: the first sees 140 GiB free and takes (141 - 2) / 2 = 69.5 GiB,
// the second then sees 140 - 69.5 - 0.5 (the first's context) = 70 GiB free and takes 70 - 1 =
// 69 GiB (below its share); without the share the first would take 139 GiB and the second fail.
TEST(PoolSize, RanksSharingAGpuTakeTheirShare) {
  const size_t total = 141 * kGiB;
  auto first = default_pool_bytes(140 * kGiB, total, 2, 0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 139 * kGiB / 2);
  const size_t left = 140 * kGiB - *first - kGiB / 2;
  auto second = default_pool_bytes(left, total, 2, 0);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(*second, 69 * kGiB);
  EXPECT_LE(*first + *second + 2 * kGiB, total);
}

TEST(PoolSize, TooLittleIsRefusedNamingTheFigures) {
  auto low = default_pool_bytes(2 * kGiB, 80 * kGiB, 1, 3);
  ASSERT_FALSE(low.ok());
  EXPECT_EQ(low.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(low.status().message().find("GPU 3 has"), std::string::npos);
  auto crowded = default_pool_bytes(15 * kGiB, 16 * kGiB, 16, 1);
  ASSERT_FALSE(crowded.ok());
  EXPECT_NE(crowded.status().message().find("is shared by 16 ranks"), std::string::npos)
      << crowded.status().to_string();
}

}  // namespace
}  // namespace strata::gpu
