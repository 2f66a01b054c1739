#include "cpu/pinned_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "core/log.h"
#include "cpu/pinned_registry.h"

namespace strata::cpu {

namespace {

size_t round_up_pages(size_t n) {
  return (n + kPinnedAlignment - 1) / kPinnedAlignment * kPinnedAlignment;
}

void raise_peak(PinnedPoolCounters& c) {
  const size_t now = c.locked_bytes.load() + c.unlocked_bytes.load();
  size_t peak = c.peak_bytes.load();
  while (now > peak && !c.peak_bytes.compare_exchange_weak(peak, now)) {
  }
}

// `bytes` (whole huge pages) from the reserved huge pages, or nullptr when too few are free. A
// private MAP_HUGETLB mapping takes its pages from the reserved pool at mmap, never at first
// touch, so a shortage is seen here and not as a SIGBUS later.
void* map_reserved_huge(size_t bytes) {
#ifdef MAP_HUGE_SHIFT
  constexpr int kHuge2Mb = 21 << MAP_HUGE_SHIFT;  // log2(2 MiB): not the system's default size
#else
  constexpr int kHuge2Mb = 0;
#endif
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | kHuge2Mb, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// `bytes` of anonymous memory (errno set and nullptr on failure). With `huge`, on a 2 MiB
// boundary and advised MADV_HUGEPAGE: cut out of a mapping one huge page longer, the slack
// before and after it unmapped at once.
void* map_anonymous(size_t bytes, bool huge) {
  const size_t reserve = huge ? bytes + kHugePageBytes : bytes;
  void* raw = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  if (!huge) return raw;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (base + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (start > base) munmap(raw, start - base);
  const uintptr_t end = start + bytes;
  if (base + reserve > end) munmap(reinterpret_cast<void*>(end), base + reserve - end);
  void* p = reinterpret_cast<void*>(start);
  madvise(p, bytes, MADV_HUGEPAGE);  // advice: refused or ignored, the pages stay 4 KiB
  return p;
}

}  // namespace

std::string transparent_huge_page_mode(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t open = line.find('[');
  const size_t close = line.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    size_bytes_ = other.size_bytes_;
    mapped_bytes_ = other.mapped_bytes_;
    mapping_bytes_ = other.mapping_bytes_;
    locked_ = other.locked_;
    reserved_huge_pages_ = other.reserved_huge_pages_;
    tracked_ = other.tracked_;
    counters_ = std::move(other.counters_);
    other.data_ = nullptr;
    other.size_bytes_ = 0;
    other.mapped_bytes_ = 0;
    other.mapping_bytes_ = 0;
    other.locked_ = false;
    other.reserved_huge_pages_ = false;
    other.tracked_ = false;
  }
  return *this;
}

void PinnedBuffer::release() {
  if (data_ == nullptr) return;
  if (tracked_) untrack_pinned(data_);  // the device backend lets go of it first
  if (locked_) munlock(data_, mapped_bytes_);
  munmap(data_, mapping_bytes_);
  if (counters_) {
    (locked_ ? counters_->locked_bytes : counters_->unlocked_bytes).fetch_sub(mapped_bytes_);
    counters_->allocations.fetch_sub(1);
  }
  data_ = nullptr;
  size_bytes_ = 0;
  mapped_bytes_ = 0;
  mapping_bytes_ = 0;
  locked_ = false;
  reserved_huge_pages_ = false;
  tracked_ = false;
  counters_.reset();
}

PinnedPool::PinnedPool(PinnedPoolOptions options)
    : options_(options), counters_(std::make_shared<PinnedPoolCounters>()) {}

Result<PinnedBuffer> PinnedPool::allocate(size_t size_bytes) {
  PinnedBuffer buf;
  if (size_bytes == 0) return buf;
  const size_t mapped = round_up_pages(size_bytes);
  if (options_.limit_bytes != 0 && held_bytes() + mapped > options_.limit_bytes) {
    return make_error(ErrorCode::kOutOfMemory, "pinned pool: allocating ", mapped,
                      " bytes would exceed the limit of ", options_.limit_bytes, " bytes (",
                      held_bytes(), " held)");
  }
  const bool huge = options_.huge_pages && mapped >= kHugePageBytes;
  const size_t whole_huge = (mapped + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = huge && options_.reserved_huge_pages ? map_reserved_huge(whole_huge) : nullptr;
  const bool reserved = p != nullptr;
  if (!reserved) {
    p = map_anonymous(mapped, huge);
    if (p == nullptr) {
      return make_error(ErrorCode::kOutOfMemory, "pinned pool: mmap of ", mapped,
                        " bytes failed: ", std::strerror(errno));
    }
  }
  if (huge && !reserved) {
    static const bool thp_off = transparent_huge_page_mode() == "never";
    if (thp_off) {
      std::call_once(counters_->warned_small_pages, [&] {
        STRATA_LOG(kWarn,
                   "pinned pool: buffers of 2 MiB and more are of 4 KiB pages: no reserved "
                   "huge pages are free and transparent ones are off "
                   "(/sys/kernel/mm/transparent_hugepage/enabled: never); transfers from "
                   "them can be several times slower (docs/training.md): reserve huge "
                   "pages (echo N > /proc/sys/vm/nr_hugepages) or set that mode to madvise");
      });
    }
  }
  // Never copied into a child process (popen, a launcher's helper): a fork would write-protect
  // every pinned page for copy-on-write, and copy at once those held for I/O (registered with
  // io_uring or CUDA), each reserved huge page into a free one, failing when none is.
  madvise(p, reserved ? whole_huge : mapped, MADV_DONTFORK);
  bool locked = false;
  if (!options_.force_unlocked) {
    // Reserved huge pages are never swapped out: locked without mlock (and without being
    // charged to RLIMIT_MEMLOCK).
    if (reserved || mlock(p, mapped) == 0) {
      locked = true;
    } else {
      const int err = errno;
      std::call_once(counters_->warned, [&] {
        STRATA_LOG(kWarn, "pinned pool: mlock of " << mapped << " bytes refused ("
                                                   << std::strerror(err)
                                                   << "; raise RLIMIT_MEMLOCK / ulimit -l); "
                                                      "using unlocked host memory");
      });
    }
  }
  buf.data_ = p;
  buf.size_bytes_ = size_bytes;
  buf.mapped_bytes_ = mapped;
  buf.mapping_bytes_ = reserved ? whole_huge : mapped;
  buf.locked_ = locked;
  buf.reserved_huge_pages_ = reserved;
  buf.counters_ = counters_;
  if (options_.device_visible) {  // registered with the device backend (pinned_registry.h)
    track_pinned(p, mapped);
    buf.tracked_ = true;
  }
  (locked ? counters_->locked_bytes : counters_->unlocked_bytes).fetch_add(mapped);
  counters_->allocations.fetch_add(1);
  raise_peak(*counters_);
  return buf;
}

PinnedPool& default_pinned_pool() {
  static PinnedPool pool;
  return pool;
}

Result<PinnedBuffer> allocate_io_buffer(size_t size_bytes) {
  PinnedPoolOptions o;
  o.force_unlocked = true;
  o.device_visible = false;
  return PinnedPool(o).allocate(size_bytes);
}

}  // namespace strata::cpu
