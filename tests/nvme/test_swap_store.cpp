#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "nvme/swap_owner.h"
#include "swap_test_util.h"

namespace strata::nvme::test {
namespace {

class SwapEngines : public ::testing::TestWithParam<EngineCase> {};

// small_options with 64 KiB requests in 128 KiB extents: many requests per object.
SwapStoreOptions fine_options(const std::string& dir, const EngineCase& engine) {
  auto options = small_options(dir, engine.engine, engine.direct);
  options.block_bytes = 64 << 10;
  options.extent_bytes = 128 << 10;
  return options;
}

TEST_P(SwapEngines, RoundTripOddSizes) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  STRATA_OPEN_STORE_OR_SKIP(store, small_options(dir.path(), GetParam().engine, GetParam().direct));
  const std::vector<size_t> sizes = {
      1, 7, 4095, 4096, 4097, 65537, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 5003};
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto src = random_buffer(sizes[i], 100 + i);
    auto dst = sentinel_buffer(sizes[i]);
    ASSERT_TRUE(store->write(i, src.data(), sizes[i]).wait().ok());
    const Status st = store->read(i, dst.data(), sizes[i]).wait();
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(std::memcmp(src.data(), dst.data(), sizes[i]), 0) << "size " << sizes[i];
    // Bytes past size_bytes are never written into the caller's buffer.
    for (size_t b = sizes[i]; b < dst.mapped_bytes(); ++b) {
      ASSERT_EQ(dst.as<uint8_t>()[b], 0xcd) << "size " << sizes[i] << " byte " << b;
    }
  }
  // Rewriting a key with new contents and a new size.
  auto again = random_buffer(9000, 7);
  auto back = sentinel_buffer(9000);
  ASSERT_TRUE(store->write(3, again.data(), 9000).wait().ok());
  ASSERT_TRUE(store->read(3, back.data(), 9000).wait().ok());
  EXPECT_EQ(std::memcmp(again.data(), back.data(), 9000), 0);
}

TEST_P(SwapEngines, ManyRequestsInFlight) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const auto options = fine_options(dir.path(), GetParam());
  STRATA_OPEN_STORE_OR_SKIP(store, options);
  constexpr int kKeys = 48;
  const size_t size = 300 * 1024 + 123;
  std::vector<cpu::PinnedBuffer> src, dst;
  ASSERT_NO_FATAL_FAILURE(write_random_keys(*store, kKeys, size, 1000, src, dst));
  std::vector<IoHandle> handles;
  for (int k = kKeys - 1; k >= 0; --k) handles.push_back(store->read(k, dst[k].data(), size));
  for (auto& h : handles) {
    const Status st = h.wait();
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  for (int k = 0; k < kKeys; ++k) ASSERT_EQ(std::memcmp(src[k].data(), dst[k].data(), size), 0);
}

// The queue statistics count a request's time before its handle completes: once every handle
// is done, the figures are final (a caller reading them then, as bench_nvme does, sees all).
TEST_P(SwapEngines, QueueStatsAreCompleteWhenHandlesAre) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const auto options = fine_options(dir.path(), GetParam());
  STRATA_OPEN_STORE_OR_SKIP(store, options);
  constexpr int kKeys = 16;
  const size_t size = 256 << 10;  // four block-sized requests each
  std::vector<cpu::PinnedBuffer> src;
  std::vector<IoHandle> handles;
  for (int round = 0; round < 5; ++round) {
    const SwapQueueStats before = store->queue_stats();
    handles.clear();
    for (int k = 0; k < kKeys; ++k) {
      if (round == 0) src.push_back(random_buffer(size, 50 + k));
      handles.push_back(store->write(k, src[k].data(), size));
    }
    for (auto& h : handles) ASSERT_TRUE(h.wait().ok());
    const SwapQueueStats after = store->queue_stats();
    EXPECT_EQ(after.requests - before.requests, uint64_t{kKeys} * 4);
    const double busy = after.busy_seconds - before.busy_seconds;
    ASSERT_GT(busy, 0.0);
    const double mean_depth = (after.in_flight_seconds - before.in_flight_seconds) / busy;
    EXPECT_GE(mean_depth, 1.0 - 1e-9);
    EXPECT_LE(mean_depth, options.queue.queue_depth + 1e-9);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const SwapQueueStats later = store->queue_stats();
    EXPECT_EQ(later.busy_seconds, after.busy_seconds) << "round " << round;
    EXPECT_EQ(later.in_flight_seconds, after.in_flight_seconds) << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, SwapEngines,
                         ::testing::Values(EngineCase{IoEngine::kUring, true, "uring_direct"},
                                           EngineCase{IoEngine::kUring, false, "uring_buffered"},
                                           EngineCase{IoEngine::kThreadPool, true, "pool_direct"},
                                           EngineCase{IoEngine::kThreadPool, false,
                                                      "pool_buffered"}),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(SwapStore, StripesRoundRobinOverTwoDirectories) {
  strata::test::ScratchDir a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  auto options = small_options(a.path(), IoEngine::kAuto, true);
  options.dirs = {a.path(), b.path()};
  options.capacity_bytes = 16 << 20;
  STRATA_OPEN_STORE_OR_SKIP(store, options);
  ASSERT_EQ(store->paths().size(), 2u);
  for (const auto& p : store->paths()) {
    struct stat st {};
    ASSERT_EQ(stat(p.c_str(), &st), 0);
    // The data, then the owner record (swap_owner.h).
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), (8ull << 20) + strata::nvme::kSwapOwnerRecordBytes)
        << "space reserved up front: " << p;
  }
  const size_t size = 6 * (1 << 20) + 777;
  auto src = random_buffer(size, 5);
  ASSERT_TRUE(store->write(42, src.data(), size).wait().ok());
  auto loc = store->locate(42);
  ASSERT_TRUE(loc.ok());
  ASSERT_EQ(loc->size(), 7u);
  for (size_t k = 0; k < loc->size(); ++k) {
    EXPECT_EQ((*loc)[k].path, store->paths()[k % 2]) << "extent " << k;
    EXPECT_EQ((*loc)[k].offset % 4096, 0u);
  }
  // Independent check of the layout: each extent's bytes sit in its file at its offset.
  std::vector<uint8_t> bytes;
  size_t pos = 0;
  for (const auto& e : *loc) {
    bytes.resize(e.size_bytes);
    const int fd = ::open(e.path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pread(fd, bytes.data(), e.size_bytes, static_cast<off_t>(e.offset)),
              static_cast<ssize_t>(e.size_bytes));
    close(fd);
    ASSERT_EQ(std::memcmp(bytes.data(), src.as<uint8_t>() + pos, e.size_bytes), 0);
    pos += e.size_bytes;
  }
  EXPECT_EQ(pos, size);
  auto dst = sentinel_buffer(size);
  ASSERT_TRUE(store->read(42, dst.data(), size).wait().ok());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), size), 0);
}

TEST(SwapStore, FilesAreRemovedWithTheStore) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  std::vector<std::string> paths;
  {
    STRATA_OPEN_STORE_OR_SKIP(store, small_options(dir.path(), IoEngine::kAuto, true));
    paths = store->paths();
  }
  for (const auto& p : paths) EXPECT_NE(access(p.c_str(), F_OK), 0) << p;
}

// Each step-down, forced, still moves the right bytes and says what it is.
TEST(SwapStore, FallbackThreadPoolForced) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  STRATA_OPEN_STORE_OR_SKIP(store, small_options(dir.path(), IoEngine::kThreadPool, true));
  EXPECT_NE(store->describe().find("thread pool"), std::string::npos) << store->describe();
  auto src = random_buffer(2 << 20, 9);
  auto dst = sentinel_buffer(2 << 20);
  ASSERT_TRUE(store->write(1, src.data(), 2 << 20).wait().ok());
  ASSERT_TRUE(store->read(1, dst.data(), 2 << 20).wait().ok());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), 2 << 20), 0);
}

TEST(SwapStore, FixedBuffersOnAndForcedOff) {
  for (bool fixed : {true, false}) {
    strata::test::ScratchDir dir;
    ASSERT_TRUE(dir.ok());
    auto options = small_options(dir.path(), IoEngine::kUring, true);
    options.queue.fixed_buffers = fixed;
    STRATA_OPEN_STORE_OR_SKIP(store, options);
    auto src = random_buffer(2 << 20, 11);
    auto dst = sentinel_buffer(2 << 20);
    ASSERT_TRUE(store
                    ->register_buffers({BufferRegion{src.data(), src.mapped_bytes()},
                                        BufferRegion{dst.data(), dst.mapped_bytes()}})
                    .ok());
    const std::string d = store->describe();
    if (!fixed) {
      EXPECT_NE(d.find("plain buffers (disabled by option)"), std::string::npos) << d;
    } else {
      // Either registered, or refused by this kernel with the reason given.
      EXPECT_TRUE(d.find("fixed buffers") != std::string::npos ||
                  d.find("registration refused") != std::string::npos)
          << d;
    }
    ASSERT_TRUE(store->write(1, src.data(), (2 << 20) - 3).wait().ok());
    ASSERT_TRUE(store->read(1, dst.data(), (2 << 20) - 3).wait().ok());
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), (2 << 20) - 3), 0);
  }
}

TEST(SwapStore, BufferedForcedAndTmpfsRefusal) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  {
    STRATA_OPEN_STORE_OR_SKIP(store, small_options(dir.path(), IoEngine::kAuto, false));
    EXPECT_FALSE(store->direct_io());
    EXPECT_NE(store->describe().find("buffered"), std::string::npos);
    // Buffered I/O does not need aligned buffers.
    auto src = random_buffer(10000, 3);
    auto dst = sentinel_buffer(10000);
    ASSERT_TRUE(store->write(1, src.as<uint8_t>() + 1, 9999).wait().ok());
    ASSERT_TRUE(store->read(1, dst.as<uint8_t>() + 1, 9999).wait().ok());
    EXPECT_EQ(std::memcmp(src.as<uint8_t>() + 1, dst.as<uint8_t>() + 1, 9999), 0);
  }
  // A filesystem that refuses O_DIRECT (tmpfs): the store steps down by itself.
  if (access("/dev/shm", W_OK) != 0)
    GTEST_SKIP() << "no writable /dev/shm to test O_DIRECT refusal";
  strata::test::ScratchDir shm("/dev/shm");
  ASSERT_TRUE(shm.ok());
  STRATA_OPEN_STORE_OR_SKIP(store, small_options(shm.path(), IoEngine::kAuto, true));
  auto src = random_buffer(5000, 4);
  auto dst = sentinel_buffer(5000);
  ASSERT_TRUE(store->write(1, src.data(), 5000).wait().ok());
  ASSERT_TRUE(store->read(1, dst.data(), 5000).wait().ok());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), 5000), 0);
}

TEST(SwapStore, UnalignedBufferWithDirectIoIsAnError) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  STRATA_OPEN_STORE_OR_SKIP(store, small_options(dir.path(), IoEngine::kAuto, true));
  if (!store->direct_io()) GTEST_SKIP() << "filesystem refuses O_DIRECT";
  auto src = random_buffer(10000, 3);
  const Status st = store->write(1, src.as<uint8_t>() + 1, 100).wait();
  EXPECT_EQ(st.code(), ErrorCode::kConfig) << st.to_string();
}

TEST(SwapStore, ParseNvmePaths) {
  auto two = parse_nvme_paths("a,b");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(parse_nvme_paths("a,,b").ok());
  EXPECT_FALSE(parse_nvme_paths("").ok());
  EXPECT_EQ(parse_nvme_paths("a,").status().code(), ErrorCode::kConfig);
}

}  // namespace
}  // namespace strata::nvme::test
