// Shared helpers for the swap-store tests.
#pragma once

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "cpu/pinned_memory.h"
#include "nvme/swap_store.h"
#include "scratch_dir.h"

namespace strata::nvme::test {

inline cpu::PinnedBuffer random_buffer(size_t size_bytes, uint64_t seed) {
  static cpu::PinnedPool pool(cpu::PinnedPoolOptions{.force_unlocked = true});
  auto buf = pool.allocate(size_bytes + 4096);  // slack so tests can check it stays untouched
  STRATA_CHECK_OK(buf.status());
  std::mt19937_64 rng(seed);
  auto* p = buf->as<uint8_t>();
  for (size_t i = 0; i < size_bytes; ++i) p[i] = static_cast<uint8_t>(rng() >> 56);
  return std::move(buf).value();
}

// Flips bit `mask` of the byte at `offset` of `path` and syncs it (a corrupted extent).
inline void flip_byte(const std::string& path, uint64_t offset, uint8_t mask = 0x10) {
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  uint8_t byte = 0;
  const auto where = static_cast<off_t>(offset);
  ASSERT_EQ(pread(fd, &byte, 1, where), 1);
  byte ^= mask;
  ASSERT_EQ(pwrite(fd, &byte, 1, where), 1);
  ASSERT_EQ(fsync(fd), 0);
  ::close(fd);
}

inline cpu::PinnedBuffer sentinel_buffer(size_t size_bytes) {
  auto buf = random_buffer(size_bytes, 0);
  std::memset(buf.data(), 0xcd, buf.mapped_bytes());
  return buf;
}

// Writes keys 0..n-1 of `size_bytes` random bytes each (seeds seed, seed + 1, ...) together and
// waits for all: `src` gets the bytes written, `dst` a sentinel-filled buffer per key to read
// into. Call under ASSERT_NO_FATAL_FAILURE.
inline void write_random_keys(SwapStore& store, int n, size_t size_bytes, uint64_t seed,
                              std::vector<cpu::PinnedBuffer>& src,
                              std::vector<cpu::PinnedBuffer>& dst) {
  std::vector<IoHandle> handles;
  for (int k = 0; k < n; ++k) {
    src.push_back(random_buffer(size_bytes, seed + k));
    dst.push_back(sentinel_buffer(size_bytes));
    handles.push_back(store.write(k, src.back().data(), size_bytes));
  }
  for (auto& h : handles) ASSERT_TRUE(h.wait().ok());
}

struct EngineCase {
  IoEngine engine;
  bool direct;
  std::string name;
};

inline SwapStoreOptions small_options(const std::string& dir, IoEngine engine, bool direct) {
  SwapStoreOptions o;
  o.dirs = {dir};
  o.capacity_bytes = 64ull << 20;
  o.extent_bytes = 1 << 20;
  o.block_bytes = 256 << 10;
  o.queue.engine = engine;
  o.queue.queue_depth = 8;
  o.direct_io = direct;
  return o;
}

// Opens a store, or skips the test when io_uring itself was asked for and is unavailable.
#define STRATA_OPEN_STORE_OR_SKIP(var, options)                                      \
  auto var##_result = SwapStore::open(options);                                      \
  if (!var##_result.ok() && var##_result.status().code() == ErrorCode::kUnsupported) \
    GTEST_SKIP() << var##_result.status().to_string();                               \
  ASSERT_TRUE(var##_result.ok()) << var##_result.status().to_string();               \
  auto var = std::move(var##_result).value()

}  // namespace strata::nvme::test
