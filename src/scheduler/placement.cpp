#include "scheduler/placement.h"

#include <algorithm>

namespace strata::sched {

bool Placement::allocate(int32_t buffer, uint64_t bytes, std::vector<int32_t>& released_by,
                         const std::function<bool(int32_t)>& free_to_reuse) {
  const uint64_t size = std::max<uint64_t>((bytes + align_ - 1) / align_ * align_, align_);
  // A free range that costs no new dependency: never used, or released by a task the acquirer
  // already comes after.
  auto harmless = [&](const Range& r) {
    return r.released_by < 0 || (free_to_reuse && free_to_reuse(r.released_by));
  };
  // First fit over runs of free ranges that pass `usable`; the run's last range index or npos.
  auto find_run = [&](auto usable, size_t& first) {
    uint64_t run = 0;
    for (size_t i = 0; i < ranges_.size(); ++i) {
      if (ranges_[i].owner >= 0 || !usable(ranges_[i])) {
        run = 0;
        continue;
      }
      if (run == 0) first = i;
      run += ranges_[i].bytes;
      if (run >= size) return i;
    }
    return ranges_.size();
  };
  // Grows the arena at its end, taking the free tail when `take_tail`; npos past the limit.
  auto grow = [&](bool take_tail, size_t& first) {
    const bool tail = take_tail && !ranges_.empty() && ranges_.back().owner < 0;
    first = tail ? ranges_.size() - 1 : ranges_.size();
    const uint64_t start = tail ? ranges_[first].offset : capacity_;
    if (start + size > limit_ || start + size < start) return ranges_.size() + 1;
    ranges_.push_back(Range{capacity_, start + size - capacity_, -1, -1});
    capacity_ = start + size;
    return ranges_.size() - 1;
  };
  size_t first = 0;
  // 1. Memory whose reuse adds no dependency; 2. new memory at the end (the free tail too when
  // that adds none); 3. any free memory, ordered after the tasks that released it.
  size_t i = find_run(harmless, first);
  if (i == ranges_.size()) {
    i = grow(ranges_.empty() || harmless(ranges_.back()), first);
    if (i > ranges_.size()) i = find_run([](const Range&) { return true; }, first);
    if (i == ranges_.size()) i = grow(true, first);
    if (i > ranges_.size()) return false;
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
