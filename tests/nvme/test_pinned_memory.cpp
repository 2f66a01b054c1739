#include "cpu/pinned_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

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

// The value of `field` (e.g. "THPeligible:") for the mapping holding p (/proc/self/smaps), or
// -1 when not found.
long smaps_field(const void* p, const std::string& field) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < 16) {
      inside = at >= lo && at < hi;
    } else if (inside && line.rfind(field, 0) == 0) {
      return std::atol(line.c_str() + field.size());
    }
  }
  return -1;
}

int thp_eligible(const void* p) { return static_cast<int>(smaps_field(p, "THPeligible:")); }

// The kernel's transparent huge page mode: "always", "madvise" or "never".
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all;
  std::getline(f, all);
  const size_t a = all.find('['), b = all.find(']');
  return a == std::string::npos || b == std::string::npos ? "" : all.substr(a + 1, b - a - 1);
}

TEST(PinnedPool, LargeBuffersAreAlignedAndAdvisedForHugePages) {
  PinnedPool pool(PinnedPoolOptions{.reserved_huge_pages = false});
  PinnedPoolOptions off;
  off.huge_pages = false;
  PinnedPool plain(off);
  auto big = pool.allocate(5 * kHugePageBytes + 12345);
  auto small = pool.allocate(kHugePageBytes - kPinnedAlignment);
  auto no = plain.allocate(5 * kHugePageBytes);
  ASSERT_TRUE(big.ok() && small.ok() && no.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big->data()) % kHugePageBytes, 0u);
  // The accounting is unchanged: page-rounded bytes, not huge-page-rounded.
  EXPECT_EQ(big->mapped_bytes(), 5 * kHugePageBytes + 4 * kPinnedAlignment);
  EXPECT_EQ(pool.held_bytes(), big->mapped_bytes() + small->mapped_bytes());
  std::memset(big->data(), 0x3c, big->size_bytes());  // every byte of it is mapped and writable
  EXPECT_EQ(big->as<uint8_t>()[big->size_bytes() - 1], 0x3c);
  const std::string mode = thp_mode();
  if (mode == "madvise") {
    // Advised: eligible; not advised (below 2 MiB, or turned off): not.
    EXPECT_EQ(thp_eligible(big->data()), 1);
    EXPECT_EQ(thp_eligible(no->data()), 0);
  } else {
    std::printf("transparent huge pages '%s': eligibility not checked\n", mode.c_str());
  }
}

// The page size the kernel maps p with, in KiB (-1 when not found).
long kernel_page_kib(const void* p) { return smaps_field(p, "KernelPageSize:"); }

// HugePages_Free of /proc/meminfo (reserved 2 MiB pages not in use).
long free_reserved_huge_pages() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("HugePages_Free:", 0) == 0) return std::atol(line.c_str() + 15);
  }
  return 0;
}

TEST(PinnedPool, LargeBuffersTakeReservedHugePagesWhileFree) {
  if (free_reserved_huge_pages() < 4) {
    GTEST_SKIP() << "fewer than 4 reserved huge pages free (vm.nr_hugepages): the path that "
                    "takes them is not reachable here";
  }
  PinnedPool pool;
  auto big = pool.allocate(2 * kHugePageBytes + 12345);
  auto small = pool.allocate(kHugePageBytes - kPinnedAlignment);
  PinnedPool transparent(PinnedPoolOptions{.reserved_huge_pages = false});
  auto thp = transparent.allocate(2 * kHugePageBytes);
  ASSERT_TRUE(big.ok() && small.ok() && thp.ok());
  ASSERT_TRUE(big->on_reserved_huge_pages()) << "free reserved pages, but not taken";
  EXPECT_FALSE(small->on_reserved_huge_pages());
  EXPECT_FALSE(thp->on_reserved_huge_pages());
  EXPECT_EQ(kernel_page_kib(big->data()), 2048);  // the kernel's view, not the flag
  EXPECT_EQ(kernel_page_kib(small->data()), 4);
  EXPECT_EQ(kernel_page_kib(thp->data()), 4);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big->data()) % kHugePageBytes, 0u);
  EXPECT_TRUE(big->locked());  // never swapped out
  // Accounted as any buffer: page-rounded bytes (the slack to the 2 MiB boundary is not).
  EXPECT_EQ(big->mapped_bytes(), 2 * kHugePageBytes + 4 * kPinnedAlignment);
  EXPECT_EQ(pool.held_bytes(), big->mapped_bytes() + small->mapped_bytes());
  for (size_t i = 0; i < big->size_bytes(); i += 4093) ASSERT_EQ(big->as<uint8_t>()[i], 0);
  std::memset(big->data(), 0x7e, big->size_bytes());
  EXPECT_EQ(big->as<uint8_t>()[big->size_bytes() - 1], 0x7e);
}

// When the reserved pages run out, buffers come from transparent huge pages instead.
TEST(PinnedPool, ReservedHugePagesRunningOutFallsBack) {
  const long free_pages = free_reserved_huge_pages();
  if (free_pages < 1) GTEST_SKIP() << "no reserved huge pages free (vm.nr_hugepages)";
  PinnedPool pool;
  std::vector<PinnedBuffer> held;
  for (long i = 0; i <= free_pages + 8; ++i) {
    auto b = pool.allocate(kHugePageBytes);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    const bool reserved = b->on_reserved_huge_pages();
    held.push_back(std::move(b).value());
    if (!reserved) break;
  }
  const PinnedBuffer& last = held.back();
  ASSERT_FALSE(last.on_reserved_huge_pages()) << "more buffers than free pages all reserved";
  EXPECT_EQ(kernel_page_kib(last.data()), 4);
  std::memset(last.data(), 0x11, last.size_bytes());
  EXPECT_EQ(pool.held_bytes(), held.size() * kHugePageBytes);
}

// Whether `p` is mapped in this process: mincore fails with ENOMEM on an unmapped range.
bool mapped_here(const void* p) {
  unsigned char vec = 0;
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095});
  return mincore(page, 1, &vec) == 0;
}

TEST(PinnedPool, BuffersAreNotInheritedByChildProcesses) {
  PinnedPool pool;
  // A small buffer (4 KiB pages) and a large one (huge pages: reserved ones where free).
  for (const size_t size : {size_t{64} << 10, size_t{4} << 20}) {
    auto b = pool.allocate(size);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    std::vector<unsigned char> heap(size);  // ordinary memory, which a child does inherit
    ASSERT_TRUE(mapped_here(b->data()));
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      // 1: the heap is missing (the check itself is broken); 2: the pinned buffer came along.
      _exit(!mapped_here(heap.data()) ? 1 : mapped_here(b->data()) ? 2 : 0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << size << " bytes" << (b->on_reserved_huge_pages() ? " (reserved)" : "");
    EXPECT_TRUE(mapped_here(b->data()));
  }
}

TEST(PinnedPool, TransparentHugePageModeIsTheBracketedWord) {
  const std::string path = testing::TempDir() + "strata_thp_enabled";
  const auto mode_of = [&](const std::string& text) {
    std::ofstream(path) << text;
    return transparent_huge_page_mode(path);
  };
  EXPECT_EQ(mode_of("always [madvise] never\n"), "madvise");
  EXPECT_EQ(mode_of("[always] madvise never\n"), "always");
  EXPECT_EQ(mode_of("always madvise [never]\n"), "never");
  EXPECT_EQ(mode_of("always madvise never\n"), "");
  EXPECT_EQ(mode_of(""), "");
  std::remove(path.c_str());
  EXPECT_EQ(transparent_huge_page_mode(path), "");  // missing
  const std::string here = transparent_huge_page_mode();
  EXPECT_TRUE(here.empty() || here == "always" || here == "madvise" || here == "never") << here;
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
