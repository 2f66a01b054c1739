// OffsetArena: alignment, best fit, coalescing, peak tracking and thread safety, checked
// against a simple model of which bytes are taken.
#include "gpu/cuda/offset_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "test_rng.h"

namespace strata::gpu::cuda {
namespace {

TEST(OffsetArena, AlignsAndRoundsUp) {
  OffsetArena arena(10000);
  EXPECT_EQ(arena.capacity_bytes(), 9984u);  // rounded down to 256
  auto a = arena.allocate(1);
  auto b = arena.allocate(0);
  auto c = arena.allocate(257);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a % 256, 0u);
  EXPECT_EQ(*b % 256, 0u);
  EXPECT_EQ(*c % 256, 0u);
  EXPECT_EQ(arena.used_bytes(), 256u + 256u + 512u);
  EXPECT_NE(*a, *b);
}

TEST(OffsetArena, RefusesOverCapacityAndRecovers) {
  OffsetArena arena(4096);
  auto a = arena.allocate(4096);
  ASSERT_TRUE(a);
  EXPECT_FALSE(arena.allocate(1));
  arena.free(*a);
  EXPECT_EQ(arena.used_bytes(), 0u);
  EXPECT_EQ(arena.peak_bytes(), 4096u);
  EXPECT_FALSE(arena.allocate(4097));
  EXPECT_TRUE(arena.allocate(4096));
}

TEST(OffsetArena, CoalescesNeighboursInAnyFreeOrder) {
  OffsetArena arena(256 * 4);
  auto a = arena.allocate(256);
  auto b = arena.allocate(256);
  auto c = arena.allocate(256);
  auto d = arena.allocate(256);
  ASSERT_TRUE(a && b && c && d);
  arena.free(*b);
  arena.free(*d);
  EXPECT_EQ(arena.largest_free_bytes(), 256u);
  EXPECT_FALSE(arena.allocate(512));  // fragmented: 512 free but not contiguous
  arena.free(*c);                     // joins b, c and d
  EXPECT_EQ(arena.largest_free_bytes(), 768u);
  arena.free(*a);
  EXPECT_EQ(arena.free_block_count(), 1u);
  EXPECT_EQ(arena.largest_free_bytes(), 1024u);
}

TEST(OffsetArena, BestFitPicksTheSmallestBlockThatFits) {
  OffsetArena arena(256 * 10);
  auto a = arena.allocate(256 * 3);  // [0, 3)
  auto s1 = arena.allocate(256);     // [3, 4)
  auto b = arena.allocate(256);      // [4, 5)
  auto s2 = arena.allocate(256);     // [5, 6)
  ASSERT_TRUE(a && s1 && b && s2);
  arena.free(*a);  // free blocks: [0,3) size 3, [4,5) size 1 after freeing b, [6,10) size 4
  arena.free(*b);
  auto x = arena.allocate(256);
  ASSERT_TRUE(x);
  EXPECT_EQ(*x, 256u * 4);  // the one-block hole, not the front of a larger block
}

// Random allocate/free sequence against a byte-ownership model: no two live blocks overlap,
// all lie within capacity, and used_bytes equals the model's sum.
TEST(OffsetArena, RandomSequenceNeverOverlaps) {
  constexpr size_t kCap = 256 * 512;
  OffsetArena arena(kCap);
  testing::TestRng rng(7);
  std::vector<std::pair<size_t, size_t>> live;  // offset, rounded size
  size_t model_used = 0;
  size_t model_peak = 0;
  for (uint64_t i = 0; i < 4000; ++i) {
    if (!live.empty() && rng.below(2 * i, 3) == 0) {
      const size_t k = rng.below(2 * i + 1, live.size());
      arena.free(live[k].first);
      model_used -= live[k].second;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      const size_t bytes = 1 + rng.below(2 * i + 1, 256 * 16);
      auto off = arena.allocate(bytes);
      if (!off) continue;
      const size_t size = OffsetArena::round_up(bytes);
      ASSERT_EQ(*off % 256, 0u);
      ASSERT_LE(*off + size, kCap);
      for (const auto& [o, s] : live) ASSERT_TRUE(*off + size <= o || o + s <= *off);
      live.emplace_back(*off, size);
      model_used += size;
      model_peak = std::max(model_peak, model_used);
    }
    ASSERT_EQ(arena.used_bytes(), model_used);
  }
  EXPECT_EQ(arena.peak_bytes(), model_peak);
  for (const auto& [o, s] : live) arena.free(o);
  EXPECT_EQ(arena.used_bytes(), 0u);
  EXPECT_EQ(arena.free_block_count(), 1u);
}

TEST(OffsetArena, ConcurrentAllocateAndFree) {
  OffsetArena arena(256 * 4096);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&arena, t] {
      testing::TestRng rng(11, static_cast<uint64_t>(t));
      std::vector<size_t> mine;
      for (uint64_t i = 0; i < 2000; ++i) {
        if (auto off = arena.allocate(256 * (1 + rng.below(i, 4)))) mine.push_back(*off);
        if (mine.size() > 50) {
          arena.free(mine.front());
          mine.erase(mine.begin());
        }
      }
      for (size_t off : mine) arena.free(off);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(arena.used_bytes(), 0u);
  EXPECT_EQ(arena.free_block_count(), 1u);
}

}  // namespace
}  // namespace strata::gpu::cuda
