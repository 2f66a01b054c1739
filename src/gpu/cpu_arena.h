// CpuArena: the capped "device memory" pool of a CpuDevice (DESIGN.md §3).
// One virtual reservation of `limit_bytes` (mmap, MAP_NORESERVE: pages cost nothing until
// touched), carved by a best-fit free list with 256-byte alignment and coalescing of neighbours,
// so out-of-memory and fragmentation behave like a GPU's fixed pool.
// Ownership: owns the mapping; blocks handed out must be freed before the arena is destroyed.
// Thread safety: allocate/free/info are thread-safe (one mutex).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "core/status.h"

namespace strata::gpu {

class CpuArena {
 public:
  static constexpr size_t kAlignment = 256;

  // Reserves `limit_bytes` (rounded up to the alignment) of address space.
  static Result<std::unique_ptr<CpuArena>> create(size_t limit_bytes);
  ~CpuArena();
  CpuArena(const CpuArena&) = delete;
  CpuArena& operator=(const CpuArena&) = delete;

  // A block of at least `bytes` (rounded up to 256), or kOutOfMemory naming the requested bytes,
  // the bytes in use and the limit. bytes == 0 gives nullptr.
  Result<void*> allocate(size_t bytes);
  // Returns a block from allocate(); `bytes` must be the size asked for.
  void free(void* ptr, size_t bytes);

  size_t limit_bytes() const { return limit_bytes_; }
  size_t used_bytes() const;
  size_t peak_bytes() const;
  size_t largest_free_block_bytes() const;
  // Number of free blocks (1 when nothing is allocated: coalescing keeps the list short).
  size_t free_block_count() const;

 private:
  CpuArena(char* base, size_t limit_bytes);
  void insert_free_locked(size_t offset, size_t size);
  void erase_free_locked(std::map<size_t, size_t>::iterator it);

  char* base_;
  size_t limit_bytes_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_by_offset_;     // offset -> size
  std::multimap<size_t, size_t> free_by_size_;  // size -> offset
  std::map<size_t, size_t> allocated_;          // offset -> rounded size
  size_t used_bytes_ = 0;
  size_t peak_bytes_ = 0;
};

}  // namespace strata::gpu
