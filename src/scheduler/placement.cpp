#include "scheduler/placement.h"

#include <algorithm>

namespace strata::sched {

bool Placement::allocate(int32_t buffer, uint64_t bytes, std::vector<int32_t>& released_by) {
  const uint64_t size = std::max<uint64_t>((bytes + align_ - 1) / align_ * align_, align_);
  size_t first = 0;
  uint64_t run = 0;
  size_t i = 0;
  for (; i < ranges_.size(); ++i) {
    if (ranges_[i].owner >= 0) {
      run = 0;
      continue;
    }
    if (run == 0) first = i;
    run += ranges_[i].bytes;
    if (run >= size) break;
  }
  if (i == ranges_.size()) {
    // No run of free ranges is large enough: take the free tail (if any) and grow the arena.
    if (ranges_.empty() || ranges_.back().owner >= 0) {
      first = ranges_.size();
      run = 0;
    }
    const uint64_t start = first < ranges_.size() ? ranges_[first].offset : capacity_;
    if (start + size > limit_ || start + size < start) return false;
    ranges_.push_back(Range{capacity_, start + size - capacity_, -1, -1});
    capacity_ = start + size;
    i = ranges_.size() - 1;
  }
  for (size_t k = first; k <= i; ++k) {
    if (ranges_[k].released_by >= 0) released_by.push_back(ranges_[k].released_by);
  }
  const uint64_t offset = ranges_[first].offset;
  const uint64_t end_of_run = ranges_[i].offset + ranges_[i].bytes;
  const int32_t tail_releaser = ranges_[i].released_by;
  ranges_.erase(ranges_.begin() + static_cast<std::ptrdiff_t>(first),
                ranges_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  std::vector<Range> inserted{Range{offset, size, buffer, -1}};
  if (end_of_run > offset + size) {
    inserted.push_back(Range{offset + size, end_of_run - offset - size, -1, tail_releaser});
  }
  ranges_.insert(ranges_.begin() + static_cast<std::ptrdiff_t>(first), inserted.begin(),
                 inserted.end());
  offsets_[buffer] = offset;
  return true;
}

bool Placement::release(int32_t buffer, int32_t task) {
  for (auto& r : ranges_) {
    if (r.owner == buffer) {
      r.owner = -1;
      r.released_by = task;
      return true;
    }
  }
  return false;
}

uint64_t Placement::used_bytes() const {
  uint64_t used = 0;
  for (const auto& r : ranges_) used += r.owner >= 0 ? r.bytes : 0;
  return used;
}

uint64_t Placement::offset_of(int32_t buffer) const {
  auto it = offsets_.find(buffer);
  return it == offsets_.end() ? 0 : it->second;
}

std::vector<std::pair<int32_t, uint64_t>> Placement::largest_live(size_t count) const {
  std::vector<std::pair<int32_t, uint64_t>> live;
  for (const auto& r : ranges_) {
    if (r.owner >= 0) live.emplace_back(r.owner, r.bytes);
  }
  std::stable_sort(live.begin(), live.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (live.size() > count) live.resize(count);
  return live;
}

}  // namespace strata::sched
