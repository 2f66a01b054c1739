// OffsetArena: the carving of one device allocation (DESIGN.md §3). Hands out 256-byte aligned
// offsets into [0, capacity) by best fit over a free list that coalesces neighbours on free, and
// tracks bytes in use and the peak. It never touches memory itself (CudaDevice adds the base
// pointer), so it is plain C++ and testable without a GPU.
// Thread safety: all methods are thread-safe (one mutex).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace strata::gpu::cuda {

class OffsetArena {
 public:
  static constexpr size_t kAlignment = 256;

  // The usable capacity is capacity_bytes rounded down to kAlignment.
  explicit OffsetArena(size_t capacity_bytes);
  OffsetArena(const OffsetArena&) = delete;
  OffsetArena& operator=(const OffsetArena&) = delete;

  // Offset of a block of at least `bytes` (0 counts as 1), rounded up to kAlignment; nullopt when
  // no free block is large enough.
  std::optional<size_t> allocate(size_t bytes);
  // Returns the block at `offset` (from allocate); aborts on an offset that is not allocated.
  void free(size_t offset);

  size_t capacity_bytes() const { return capacity_bytes_; }
  size_t used_bytes() const;
  size_t peak_bytes() const;
  size_t largest_free_bytes() const;
  size_t free_block_count() const;

  static size_t round_up(size_t bytes);

 private:
  const size_t capacity_bytes_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;                 // offset -> size, disjoint, coalesced
  std::unordered_map<size_t, size_t> allocated_;  // offset -> rounded size
  size_t used_bytes_ = 0;
  size_t peak_bytes_ = 0;
};

}  // namespace strata::gpu::cuda
