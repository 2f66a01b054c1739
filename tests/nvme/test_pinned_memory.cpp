#include "cpu/pinned_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace strata::cpu {
namespace {

TEST(PinnedPool, AlignedZeroedAndAccounted) {
  PinnedPool pool;
  {
    auto a = pool.allocate(1);
    auto b = pool.allocate(3 * kPinnedAlignment + 5);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % kPinnedAlignment, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % kPinnedAlignment, 0u);
    EXPECT_EQ(a->size_bytes(), 1u);
    EXPECT_EQ(a->mapped_bytes(), kPinnedAlignment);
    EXPECT_EQ(b->mapped_bytes(), 4 * kPinnedAlignment);
    for (size_t i = 0; i < b->size_bytes(); ++i) ASSERT_EQ(b->as<uint8_t>()[i], 0);
    std::memset(b->data(), 0x5a, b->size_bytes());  // writable
    EXPECT_EQ(pool.held_bytes(), 5 * kPinnedAlignment);
    EXPECT_EQ(pool.locked_bytes() + pool.unlocked_bytes(), 5 * kPinnedAlignment);
    EXPECT_EQ(pool.allocations(), 2u);
    // Which counter a buffer lands in follows whether it was actually locked.
    size_t locked = (a->locked() ? a->mapped_bytes() : 0) + (b->locked() ? b->mapped_bytes() : 0);
    EXPECT_EQ(pool.locked_bytes(), locked);
  }
  EXPECT_EQ(pool.held_bytes(), 0u);
  EXPECT_EQ(pool.allocations(), 0u);
  EXPECT_EQ(pool.peak_bytes(), 5 * kPinnedAlignment);
}

TEST(PinnedPool, ForcedUnlockedFallback) {
  PinnedPool pool(PinnedPoolOptions{.force_unlocked = true});
  auto a = pool.allocate(10000);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->locked());
  EXPECT_EQ(pool.locked_bytes(), 0u);
  EXPECT_EQ(pool.unlocked_bytes(), 3 * kPinnedAlignment);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % kPinnedAlignment, 0u);
}

TEST(PinnedPool, LimitIsAnErrorNotACrash) {
  PinnedPool pool(PinnedPoolOptions{.limit_bytes = 2 * kPinnedAlignment});
  auto a = pool.allocate(kPinnedAlignment);
  ASSERT_TRUE(a.ok());
  auto b = pool.allocate(kPinnedAlignment + 1);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kOutOfMemory);
  auto c = pool.allocate(kPinnedAlignment);
  EXPECT_TRUE(c.ok());
}

TEST(PinnedPool, MoveTransfersOwnershipAndBufferOutlivesPool) {
  PinnedBuffer kept;
  {
    PinnedPool pool;
    auto a = pool.allocate(100);
    ASSERT_TRUE(a.ok());
    void* p = a->data();
    kept = std::move(a.value());
    EXPECT_TRUE(a->empty());
    EXPECT_EQ(kept.data(), p);
    EXPECT_EQ(pool.allocations(), 1u);
  }
  kept.as<char>()[99] = 1;  // still mapped after the pool object is gone
  EXPECT_EQ(kept.size_bytes(), 100u);
}

TEST(PinnedPool, ZeroBytesIsEmpty) {
  PinnedPool pool;
  auto a = pool.allocate(0);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->empty());
  EXPECT_EQ(pool.held_bytes(), 0u);
}

}  // namespace
}  // namespace strata::cpu
