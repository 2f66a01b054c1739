// Placement: offsets of a plan's buffers in one tier's arena, first fit over the free ranges,
// remembering which task released each free range (Plan::finalize turns reuse of that range into
// a dependency on that task). Internal to the scheduler. Value type; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace strata::sched {

class Placement {
 public:
  Placement() = default;
  // align: every offset and size is a multiple of it (256 on the device; 4096 in pinned host
  // memory, so buffers there can be O_DIRECT targets).
  Placement(uint64_t limit_bytes, uint64_t align) : limit_(limit_bytes), align_(align) {}

  // Places `buffer` (bytes rounded up to the alignment) under the limit and appends to
  // `released_by` the tasks that had released the memory it reuses. In order of preference: the
  // lowest free memory whose releasers all pass `free_to_reuse` (tasks the acquirer comes after
  // anyway, so reuse adds no wait), then new memory at the end of the arena, then the lowest
  // free memory of any releaser. False (and no change) when it does not fit under the limit.
  bool allocate(int32_t buffer, uint64_t bytes, std::vector<int32_t>& released_by,
                const std::function<bool(int32_t)>& free_to_reuse = {});
  // Frees `buffer`'s range; `task` is recorded as its releaser. False if it is not placed.
  bool release(int32_t buffer, int32_t task);

  uint64_t capacity_bytes() const { return capacity_; }  // the peak so far (arena size)
  uint64_t used_bytes() const;
  uint64_t offset_of(int32_t buffer) const;
  // The live buffers with the most bytes, largest first: (buffer, bytes).
  std::vector<std::pair<int32_t, uint64_t>> largest_live(size_t count) const;

 private:
  struct Range {
    uint64_t offset, bytes;
    int32_t owner;        // buffer, or -1 when free
    int32_t released_by;  // for a free range: the task that freed it, or -1
  };
  uint64_t limit_ = UINT64_MAX;
  uint64_t align_ = 256;
  uint64_t capacity_ = 0;
  std::vector<Range> ranges_;  // sorted by offset, covering [0, capacity_)
  std::map<int32_t, uint64_t> offsets_;
};

}  // namespace strata::sched
