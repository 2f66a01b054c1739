#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "swap_test_util.h"

namespace strata::nvme::test {
namespace {

class SwapFaults : public ::testing::TestWithParam<EngineCase> {};

// A store whose requests are small, so one object is many completions.
SwapStoreOptions fault_options(const std::string& dir, const EngineCase& c) {
  auto o = small_options(dir, c.engine, c.direct);
  o.block_bytes = 64 << 10;
  o.queue.queue_depth = 4;
  return o;
}

TEST_P(SwapFaults, EioOnNthCompletionNamesFileAndOffset) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  STRATA_OPEN_STORE_OR_SKIP(store, fault_options(dir.path(), GetParam()));
  const size_t size = 1 << 20;
  auto src = random_buffer(size, 1);
  auto dst = sentinel_buffer(size);
  ASSERT_TRUE(store->write(1, src.data(), size).wait().ok());
  store->set_fault_injection(FaultInjection{5, FaultKind::kEio});
  const Status st = store->read(1, dst.data(), size).wait();
  ASSERT_EQ(st.code(), ErrorCode::kIo) << st.to_string();
  EXPECT_NE(st.message().find(store->paths()[0]), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("offset"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(std::strerror(EIO)), std::string::npos) << st.message();
  // The failure does not poison the store: the next read succeeds.
  store->set_fault_injection(FaultInjection{});
  ASSERT_TRUE(store->read(1, dst.data(), size).wait().ok());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), size), 0);
  // A write failure is reported too.
  store->set_fault_injection(FaultInjection{2, FaultKind::kEio});
  EXPECT_EQ(store->write(1, src.data(), size).wait().code(), ErrorCode::kIo);
}

TEST_P(SwapFaults, ShortResultsAreResubmitted) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  STRATA_OPEN_STORE_OR_SKIP(store, fault_options(dir.path(), GetParam()));
  const size_t size = (1 << 20) + 100;
  auto src = random_buffer(size, 2);
  auto dst = sentinel_buffer(size);
  store->set_fault_injection(FaultInjection{3, FaultKind::kShort});
  ASSERT_TRUE(store->write(1, src.data(), size).wait().ok());
  store->set_fault_injection(FaultInjection{4, FaultKind::kShort});
  const Status st = store->read(1, dst.data(), size).wait();
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), size), 0);
}

TEST_P(SwapFaults, UnrecoverableShortReadIsAnError) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  STRATA_OPEN_STORE_OR_SKIP(store, fault_options(dir.path(), GetParam()));
  const size_t size = 1 << 20;
  auto src = random_buffer(size, 3);
  auto dst = sentinel_buffer(size);
  ASSERT_TRUE(store->write(1, src.data(), size).wait().ok());
  store->set_fault_injection(FaultInjection{2, FaultKind::kZero});
  const Status st = store->read(1, dst.data(), size).wait();
  ASSERT_EQ(st.code(), ErrorCode::kIo) << st.to_string();
  EXPECT_NE(st.message().find("short read"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(store->paths()[0]), std::string::npos) << st.message();
}

// The engine refusing a request (a first submission, or the rest of a short transfer): the
// job fails with an error instead of waiting for ever on a request that never went out, and
// the store carries on.
TEST_P(SwapFaults, RefusedSubmissionsFailTheJobAndTheStoreGoesOn) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  STRATA_OPEN_STORE_OR_SKIP(store, fault_options(dir.path(), GetParam()));
  const size_t size = 1 << 20;  // 16 requests of 64 KiB at depth 4
  auto src = random_buffer(size, 5);
  auto dst = sentinel_buffer(size);
  store->set_fault_injection(FaultInjection{0, FaultKind::kEio, 6});
  const Status refused = store->write(1, src.data(), size).wait();
  ASSERT_EQ(refused.code(), ErrorCode::kIo) << refused.to_string();
  EXPECT_NE(refused.message().find("refused"), std::string::npos) << refused.message();
  store->set_fault_injection(FaultInjection{});
  ASSERT_TRUE(store->write(1, src.data(), size).wait().ok());
  // Prepares 1-4 fill the queue; the first completion is short and its rest (prepare 5) is
  // refused.
  store->set_fault_injection(FaultInjection{1, FaultKind::kShort, 5});
  const Status st = store->read(1, dst.data(), size).wait();
  ASSERT_EQ(st.code(), ErrorCode::kIo) << st.to_string();
  EXPECT_NE(st.message().find("could not be resubmitted"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(store->paths()[0]), std::string::npos) << st.message();
  store->set_fault_injection(FaultInjection{});
  ASSERT_TRUE(store->read(1, dst.data(), size).wait().ok());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), size), 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, SwapFaults,
                         ::testing::Values(EngineCase{IoEngine::kUring, true, "uring"},
                                           EngineCase{IoEngine::kThreadPool, true, "pool"}),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(SwapStore, FlippedByteIsDetectedOnRead) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto options = small_options(dir.path(), IoEngine::kAuto, true);
  STRATA_OPEN_STORE_OR_SKIP(store, options);
  const size_t size = 2 * (1 << 20) + 10;
  auto src = random_buffer(size, 4);
  auto dst = sentinel_buffer(size);
  ASSERT_TRUE(store->write(7, src.data(), size).wait().ok());
  auto loc = store->locate(7);
  ASSERT_TRUE(loc.ok());
  const auto& e = (*loc)[1];  // second extent
  flip_byte(e.path, e.offset + 12345);
  const Status st = store->read(7, dst.data(), size).wait();
  ASSERT_EQ(st.code(), ErrorCode::kCorrupt) << st.to_string();
  EXPECT_NE(st.message().find(e.path), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("offset " + std::to_string(e.offset)), std::string::npos)
      << st.message();
}

// Reads verify each extent after the I/O thread has refilled the queue, and a job completes
// only once all its extents are verified (and its odd tail copied out): many small objects of
// several extents, all in flight at a depth of 128, one of them damaged.
TEST(SwapStore, DeepQueueOfSmallObjectsVerifiesEachBeforeCompleting) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto options = small_options(dir.path(), IoEngine::kAuto, true);
  options.extent_bytes = 8 << 10;
  options.block_bytes = 4 << 10;
  options.queue.queue_depth = 128;
  STRATA_OPEN_STORE_OR_SKIP(store, options);
  constexpr int kKeys = 160;
  constexpr int kDamaged = 77;
  std::vector<cpu::PinnedBuffer> src, dst;
  std::vector<size_t> sizes;
  std::vector<IoHandle> handles;
  for (int k = 0; k < kKeys; ++k) {
    sizes.push_back(static_cast<size_t>(1 + (k * 7919) % 40000));
    src.push_back(random_buffer(sizes.back(), 300 + k));
    dst.push_back(sentinel_buffer(sizes.back()));
    handles.push_back(store->write(k, src.back().data(), sizes.back()));
  }
  for (auto& h : handles) ASSERT_TRUE(h.wait().ok());
  handles.clear();
  auto loc = store->locate(kDamaged);
  ASSERT_TRUE(loc.ok());
  ASSERT_GE(loc->size(), 2u);
  flip_byte(loc->back().path, loc->back().offset + loc->back().size_bytes / 2);
  for (int k = 0; k < kKeys; ++k) handles.push_back(store->read(k, dst[k].data(), sizes[k]));
  for (int k = 0; k < kKeys; ++k) {
    const Status st = handles[k].wait();
    if (k == kDamaged) {
      EXPECT_EQ(st.code(), ErrorCode::kCorrupt) << st.to_string();
      EXPECT_NE(st.message().find("key " + std::to_string(kDamaged)), std::string::npos);
      continue;
    }
    ASSERT_TRUE(st.ok()) << "key " << k << ": " << st.to_string();
    ASSERT_EQ(std::memcmp(src[k].data(), dst[k].data(), sizes[k]), 0) << "key " << k;
  }
}

// A write's extents are hashed by the I/O thread once submitted, a bounded amount between two
// reaps: objects of many extents at a depth whose first pass submits more than that bound, each
// extent's checksum then checked against a damaged copy of it (and the intact data read back).
TEST(SwapStore, WritesHashEveryExtentWhileTheQueueRuns) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto options = small_options(dir.path(), IoEngine::kAuto, true);
  options.block_bytes = 64 << 10;
  options.queue.queue_depth = 128;  // 8 MiB submitted at once
  STRATA_OPEN_STORE_OR_SKIP(store, options);
  constexpr int kKeys = 3;
  const size_t size = 12 * (size_t{1} << 20) + 1000;  // 13 extents, an odd tail
  std::vector<cpu::PinnedBuffer> src;
  std::vector<IoHandle> handles;
  for (int k = 0; k < kKeys; ++k) {
    src.push_back(random_buffer(size, 900 + k));
    handles.push_back(store->write(k, src.back().data(), size));
  }
  for (auto& h : handles) ASSERT_TRUE(h.wait().ok());
  auto dst = sentinel_buffer(size);
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_TRUE(store->read(k, dst.data(), size).wait().ok()) << "key " << k;
    ASSERT_EQ(std::memcmp(src[k].data(), dst.data(), size), 0) << "key " << k;
    auto loc = store->locate(k);
    ASSERT_TRUE(loc.ok());
    ASSERT_EQ(loc->size(), 13u);
    for (const auto& e : *loc) {
      flip_byte(e.path, e.offset + e.size_bytes - 1);
      const Status st = store->read(k, dst.data(), size).wait();
      EXPECT_EQ(st.code(), ErrorCode::kCorrupt) << "key " << k << " at " << e.offset;
      EXPECT_NE(st.message().find("offset " + std::to_string(e.offset)), std::string::npos)
          << st.message();
      flip_byte(e.path, e.offset + e.size_bytes - 1);
    }
    ASSERT_TRUE(store->read(k, dst.data(), size).wait().ok()) << "key " << k;
  }
}

// A read's verification runs in bounded slices between reaps, oldest job first: several large
// objects (each more than one slice) read at once at a depth of 128, two of them damaged (one in
// its last extent, one in a middle one). Each damaged read fails naming its extent; the others
// complete with exact bytes, their odd tails included.
TEST(SwapStore, LargeReadsInFlightTogetherAreVerifiedInSlices) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto options = small_options(dir.path(), IoEngine::kAuto, true);
  options.block_bytes = 64 << 10;
  options.queue.queue_depth = 128;
  STRATA_OPEN_STORE_OR_SKIP(store, options);
  constexpr int kKeys = 4;
  const size_t size = 12 * (size_t{1} << 20) + 777;  // 13 extents, an odd tail
  std::vector<cpu::PinnedBuffer> src, dst;
  ASSERT_NO_FATAL_FAILURE(write_random_keys(*store, kKeys, size, 1200, src, dst));
  const std::vector<std::pair<int, size_t>> damaged = {{0, 12}, {3, 6}};  // key, extent
  std::vector<ExtentLocation> hit;
  for (const auto& [k, e] : damaged) {
    auto loc = store->locate(k);
    ASSERT_TRUE(loc.ok());
    ASSERT_EQ(loc->size(), 13u);
    hit.push_back((*loc)[e]);
    flip_byte(hit.back().path, hit.back().offset + hit.back().size_bytes / 3);
  }
  std::vector<IoHandle> handles;
  for (int k = 0; k < kKeys; ++k) handles.push_back(store->read(k, dst[k].data(), size));
  for (int k = 0; k < kKeys; ++k) {
    const Status st = handles[k].wait();
    const auto bad =
        std::find_if(damaged.begin(), damaged.end(), [&](const auto& d) { return d.first == k; });
    if (bad != damaged.end()) {
      const ExtentLocation& e = hit[static_cast<size_t>(bad - damaged.begin())];
      EXPECT_EQ(st.code(), ErrorCode::kCorrupt) << "key " << k << ": " << st.to_string();
      EXPECT_NE(st.message().find("offset " + std::to_string(e.offset)), std::string::npos)
          << st.message();
      continue;
    }
    ASSERT_TRUE(st.ok()) << "key " << k << ": " << st.to_string();
    ASSERT_EQ(std::memcmp(src[k].data(), dst[k].data(), size), 0) << "key " << k;
  }
}

TEST(SwapStore, ChecksumVerificationCanBeSwitchedOff) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto options = small_options(dir.path(), IoEngine::kAuto, true);
  options.verify_checksums = false;
  STRATA_OPEN_STORE_OR_SKIP(store, options);
  auto src = random_buffer(8192, 4);
  auto dst = sentinel_buffer(8192);
  ASSERT_TRUE(store->write(7, src.data(), 8192).wait().ok());
  auto loc = store->locate(7);
  ASSERT_TRUE(loc.ok());
  const int fd = ::open((*loc)[0].path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const uint8_t flipped = static_cast<uint8_t>(src.as<uint8_t>()[100] ^ 0xff);
  ASSERT_EQ(pwrite(fd, &flipped, 1, static_cast<off_t>((*loc)[0].offset + 100)), 1);
  ASSERT_EQ(fsync(fd), 0);
  close(fd);
  ASSERT_TRUE(store->read(7, dst.data(), 8192).wait().ok());
  EXPECT_EQ(dst.as<uint8_t>()[100], flipped);  // read as stored, unverified
}

TEST(SwapStore, OutOfReservedSpaceIsAnError) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto options = small_options(dir.path(), IoEngine::kAuto, true);
  options.capacity_bytes = 2 << 20;
  STRATA_OPEN_STORE_OR_SKIP(store, options);
  auto src = random_buffer(3 << 20, 4);
  ASSERT_TRUE(store->write(1, src.data(), 1 << 20).wait().ok());
  const Status st = store->write(2, src.data(), 2 << 20).wait();
  EXPECT_EQ(st.code(), ErrorCode::kOutOfMemory) << st.to_string();
  ASSERT_TRUE(store->remove(1).ok());
  EXPECT_TRUE(store->write(2, src.data(), 2 << 20).wait().ok());
}

// ENOSPC from a real, tiny filesystem appears at open (space is reserved up front).
TEST(SwapStore, EnospcAtOpenFromTinyFilesystem) {
  strata::test::ScratchDir mnt;
  ASSERT_TRUE(mnt.ok());
  if (mount("strata_test", mnt.path().c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs here (" << std::strerror(errno)
                 << "); ENOSPC not exercised";
  }
  auto options = small_options(mnt.path(), IoEngine::kAuto, true);
  options.capacity_bytes = 8 << 20;
  auto store = SwapStore::open(options);
  umount2(mnt.path().c_str(), MNT_DETACH);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), ErrorCode::kIo);
  EXPECT_NE(store.status().message().find(std::strerror(ENOSPC)), std::string::npos)
      << store.status().message();
  EXPECT_NE(store.status().message().find(mnt.path()), std::string::npos);
}

}  // namespace
}  // namespace strata::nvme::test
