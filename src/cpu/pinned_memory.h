// Pinned host memory: page-aligned, page-locked (mmap + mlock) buffers for I/O staging and the
// optimizer's host state. Every byte handed out is accounted for in the pool's counters, which
// the memory planner reads.
//
// When the OS refuses to lock (RLIMIT_MEMLOCK, EPERM, ENOMEM), the pool falls back to unlocked
// (still page-aligned) memory and logs one warning per pool; PinnedPoolOptions::force_unlocked
// takes that path on purpose (for tests). A device backend (CUDA) registers every buffer with
// its driver while it lives (pinned_registry.h), so that its copies from and to it are
// asynchronous DMA.
//
// Huge pages: a buffer of at least 2 MiB starts on a 2 MiB boundary and is advised
// MADV_HUGEPAGE (transparent huge pages, where the kernel allows them: the default "madvise"
// mode does), so that it is physically contiguous in 2 MiB pieces. A 1 MiB I/O request from it
// is then one DMA segment instead of up to 256: on a virtio disk, whose ring holds a bounded
// number of descriptors, that decides how many requests the device has in flight (the swap
// store read and wrote about 2.5x faster on this project's test machine; docs/benchmarks.md).
// The accounting is unchanged (page-rounded bytes); PinnedPoolOptions::huge_pages turns it off.
// Where the administrator reserved huge pages (vm.nr_hugepages) and enough are free, such a
// buffer is taken from them instead (MAP_HUGETLB; the slack up to the next 2 MiB is mapped but
// not counted), else from transparent huge pages as above: on this project's test machine,
// O_DIRECT reads into reserved huge pages ran at 1.2x the rate of reads into transparent ones
// at one time and at the same rate an hour later (docs/benchmarks.md: the virtual disk's rate
// depends on the destination pages), and fio's buffers are such pages (--mem=shmhuge), so the
// NVMe benchmark compares like with like.
// PinnedPoolOptions::reserved_huge_pages = false keeps to transparent huge pages. Where neither
// is to be had (no reserved page free, transparent ones switched off: mode "never"), a large
// buffer is of 4 KiB pages and the pool says so once, with what to do.
//
// Child processes: every buffer is MADV_DONTFORK, absent from a forked child (popen included),
// so a fork neither write-protects the pinned memory nor copies the pages held for I/O.
//
// Ownership: a PinnedBuffer owns its mapping (move-only, unmapped on destruction) and keeps the
// pool's counters alive, so it may outlive the PinnedPool object that made it.
// Thread safety: PinnedPool::allocate and the counters are safe to call from any thread; a
// PinnedBuffer is not synchronized (one owner at a time).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"

namespace strata::cpu {

// Alignment of every PinnedBuffer (a page; also satisfies O_DIRECT).
inline constexpr size_t kPinnedAlignment = 4096;

struct PinnedPoolOptions {
  bool force_unlocked = false;  // never mlock (the fallback path, forced)
  // Cap on the bytes held at once (locked or not); 0 means no cap. An allocation past it is
  // an error of kind kOutOfMemory.
  size_t limit_bytes = 0;
  bool huge_pages = true;  // buffers of >= 2 MiB: 2 MiB-aligned and advised MADV_HUGEPAGE
  // With huge_pages: such buffers from the reserved huge pages first, while enough are free.
  bool reserved_huge_pages = true;
  // Registered with the device backend (pinned_registry.h); false for memory only the disk sees.
  bool device_visible = true;
};

// The huge page size the pool aligns large buffers to.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Counters shared by a pool and its buffers.
struct PinnedPoolCounters {
  std::atomic<size_t> locked_bytes{0};    // held now, page-locked
  std::atomic<size_t> unlocked_bytes{0};  // held now, fell back to unlocked memory
  std::atomic<size_t> peak_bytes{0};      // most ever held at once (locked + unlocked)
  std::atomic<size_t> allocations{0};     // buffers held now
  std::once_flag warned;                  // the fallback warning is logged once
  std::once_flag warned_small_pages;      // so is the one about 4 KiB pages for large buffers
};

// The transparent huge page mode selected in `path` ("always", "madvise" or "never": the word
// in brackets), or "" when it cannot be read.
std::string transparent_huge_page_mode(
    const std::string& path = "/sys/kernel/mm/transparent_hugepage/enabled");

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { release(); }
  PinnedBuffer(PinnedBuffer&& other) noexcept { *this = std::move(other); }
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  std::byte* bytes() const { return static_cast<std::byte*>(data_); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size_bytes() const { return size_bytes_; }      // as requested
  size_t mapped_bytes() const { return mapped_bytes_; }  // rounded up to whole pages
  bool locked() const { return locked_; }
  // Taken from the reserved huge pages (MAP_HUGETLB), not transparent or 4 KiB pages.
  bool on_reserved_huge_pages() const { return reserved_huge_pages_; }
  bool empty() const { return data_ == nullptr; }

 private:
  friend class PinnedPool;
  void release();

  void* data_ = nullptr;
  size_t size_bytes_ = 0;
  size_t mapped_bytes_ = 0;
  size_t mapping_bytes_ = 0;  // the length munmap needs (whole huge pages when reserved)
  bool locked_ = false;
  bool reserved_huge_pages_ = false;
  bool tracked_ = false;  // in pinned_registry.h's live set
  std::shared_ptr<PinnedPoolCounters> counters_;
};

class PinnedPool {
 public:
  explicit PinnedPool(PinnedPoolOptions options = {});

  // A zero-filled buffer of at least size_bytes (whole pages are mapped). size_bytes == 0
  // gives an empty buffer.
  Result<PinnedBuffer> allocate(size_t size_bytes);

  size_t locked_bytes() const { return counters_->locked_bytes.load(); }
  size_t unlocked_bytes() const { return counters_->unlocked_bytes.load(); }
  size_t held_bytes() const { return locked_bytes() + unlocked_bytes(); }
  size_t peak_bytes() const { return counters_->peak_bytes.load(); }
  size_t allocations() const { return counters_->allocations.load(); }
  const PinnedPoolOptions& options() const { return options_; }

 private:
  PinnedPoolOptions options_;
  std::shared_ptr<PinnedPoolCounters> counters_;
};

// The process-wide pool (no cap, locking attempted).
PinnedPool& default_pinned_pool();

// A buffer for direct I/O that needs no page-locking (no device copies from it): page-aligned,
// on huge pages when it is 2 MiB or more, not locked and outside every pool's cap.
Result<PinnedBuffer> allocate_io_buffer(size_t size_bytes);

}  // namespace strata::cpu
