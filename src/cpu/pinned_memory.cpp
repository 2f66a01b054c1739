#include "cpu/pinned_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/log.h"

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

}  // namespace

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    size_bytes_ = other.size_bytes_;
    mapped_bytes_ = other.mapped_bytes_;
    locked_ = other.locked_;
    counters_ = std::move(other.counters_);
    other.data_ = nullptr;
    other.size_bytes_ = 0;
    other.mapped_bytes_ = 0;
    other.locked_ = false;
  }
  return *this;
}

void PinnedBuffer::release() {
  if (data_ == nullptr) return;
  if (locked_) munlock(data_, mapped_bytes_);
  munmap(data_, mapped_bytes_);
  if (counters_) {
    (locked_ ? counters_->locked_bytes : counters_->unlocked_bytes).fetch_sub(mapped_bytes_);
    counters_->allocations.fetch_sub(1);
  }
  data_ = nullptr;
  size_bytes_ = 0;
  mapped_bytes_ = 0;
  locked_ = false;
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
  // A huge buffer is cut out of a mapping one huge page longer, on a 2 MiB boundary; the slack
  // before and after it is unmapped at once.
  const size_t reserve = huge ? mapped + kHugePageBytes : mapped;
  void* raw = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return make_error(ErrorCode::kOutOfMemory, "pinned pool: mmap of ", reserve,
                      " bytes failed: ", std::strerror(errno));
  }
  void* p = raw;
  if (huge) {
    const auto base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t start = (base + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    if (start > base) munmap(raw, start - base);
    const uintptr_t end = start + mapped;
    if (base + reserve > end) munmap(reinterpret_cast<void*>(end), base + reserve - end);
    p = reinterpret_cast<void*>(start);
    madvise(p, mapped, MADV_HUGEPAGE);  // advice: refused or ignored, the pages stay 4 KiB
  }
  bool locked = false;
  if (!options_.force_unlocked) {
    if (mlock(p, mapped) == 0) {
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
  buf.locked_ = locked;
  buf.counters_ = counters_;
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
  return PinnedPool(o).allocate(size_bytes);
}

}  // namespace strata::cpu
