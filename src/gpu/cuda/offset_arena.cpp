// OffsetArena: best-fit carving with coalescing (see offset_arena.h).
#include "gpu/cuda/offset_arena.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace strata::gpu::cuda {

OffsetArena::OffsetArena(size_t capacity_bytes)
    : capacity_bytes_(capacity_bytes / kAlignment * kAlignment) {
  if (capacity_bytes_ > 0) free_.emplace(0, capacity_bytes_);
}

size_t OffsetArena::round_up(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes > std::numeric_limits<size_t>::max() - kAlignment) return 0;  // cannot fit
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

std::optional<size_t> OffsetArena::allocate(size_t bytes) {
  const size_t need = round_up(bytes);
  if (need == 0) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= need && (best == free_.end() || it->second < best->second)) best = it;
  }
  if (best == free_.end()) return std::nullopt;
  const size_t offset = best->first;
  const size_t remaining = best->second - need;
  free_.erase(best);
  if (remaining > 0) free_.emplace(offset + need, remaining);
  allocated_.emplace(offset, need);
  used_bytes_ += need;
  peak_bytes_ = std::max(peak_bytes_, used_bytes_);
  return offset;
}

void OffsetArena::free(size_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  auto found = allocated_.find(offset);
  STRATA_CHECK(found != allocated_.end(), "free of offset " << offset << " not allocated");
  size_t start = offset;
  size_t size = found->second;
  allocated_.erase(found);
  used_bytes_ -= size;
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
}

size_t OffsetArena::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_bytes_;
}

size_t OffsetArena::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_bytes_;
}

size_t OffsetArena::largest_free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t largest = 0;
  for (const auto& [offset, size] : free_) largest = std::max(largest, size);
  return largest;
}

size_t OffsetArena::free_block_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.size();
}

}  // namespace strata::gpu::cuda
