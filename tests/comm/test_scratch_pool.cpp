// ScratchPool (comm/scratch_pool.h): a released buffer is reused by the next take that fits,
// the pool keeps only the largest kKeep free buffers, and takes and releases from several
// threads at once hand out each buffer to one holder at a time.
#include "comm/scratch_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

namespace strata::comm {
namespace {

TEST(ScratchPool, ReleasedBufferIsReusedByATakeThatFits) {
  auto pool = ScratchPool::create();
  float* first = nullptr;
  {
    ScratchPool::Buffer b = pool->take(1000);
    ASSERT_EQ(b.size(), 1000u);
    ASSERT_FALSE(b.empty());
    first = b.data();
    for (size_t i = 0; i < b.size(); ++i) b.data()[i] = float(i);  // every element writable
  }
  ScratchPool::Buffer smaller = pool->take(600);  // fits in the released one
  EXPECT_EQ(smaller.data(), first);
  EXPECT_EQ(smaller.size(), 600u);
  ScratchPool::Buffer larger = pool->take(2000);  // nothing free fits: a new one
  EXPECT_NE(larger.data(), first);
  EXPECT_EQ(larger.size(), 2000u);
  EXPECT_TRUE(pool->take(0).empty());
}

TEST(ScratchPool, TakesTheSmallestFreeBufferThatFitsAndKeepsTheLargest) {
  auto pool = ScratchPool::create();
  const size_t n = ScratchPool::kKeep + 2;
  std::vector<float*> at(n + 1, nullptr);
  {
    std::vector<ScratchPool::Buffer> out;
    for (size_t c = 1; c <= n; ++c) {
      out.push_back(pool->take(c * 100));
      at[c] = out.back().data();
    }
  }  // all released: the two smallest (100, 200) are dropped
  ScratchPool::Buffer a = pool->take(50);
  EXPECT_EQ(a.data(), at[3]);  // the smallest kept that fits
  ScratchPool::Buffer b = pool->take(450);
  EXPECT_EQ(b.data(), at[5]);
  ScratchPool::Buffer moved = std::move(b);  // a move keeps the buffer out
  EXPECT_EQ(moved.data(), at[5]);
  ScratchPool::Buffer c = pool->take(450);
  EXPECT_EQ(c.data(), at[6]);
}

TEST(ScratchPool, ManyThreadsNeverShareABuffer) {
  auto pool = ScratchPool::create();
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int i = 0; i < 500; ++i) {
        ScratchPool::Buffer b = pool->take(1 + rng() % 4096);
        const float mark = float(t * 100000 + i);
        for (size_t j = 0; j < b.size(); ++j) b.data()[j] = mark;
        std::this_thread::yield();
        for (size_t j = 0; j < b.size(); ++j) bad += b.data()[j] != mark;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(ScratchPool, BufferOutlivesItsLastPoolHandle) {
  auto pool = ScratchPool::create();
  ScratchPool::Buffer b = pool->take(10);
  pool.reset();  // the buffer keeps the pool alive; its release must not touch freed memory
  b.data()[9] = 1.0f;
  EXPECT_EQ(b.size(), 10u);
}

}  // namespace
}  // namespace strata::comm
