// PartitionHold: the optimizer partitions a checkpoint still has to capture, while training goes
// on. An update of partition i (OffloadedOptimizer::step_partition, step, load) waits while i is
// held; the checkpoint's writer takes the partitions one at a time (pick) and releases each once
// its state is copied out (written to the checkpoint file, or read from NVMe into the writer's
// buffer). An update that waits makes its partition the writer's next pick, so the writer follows
// the order in which the training step needs them (forward order for a rotated update, backward
// order otherwise) without being told it.
// Thread safety: every member may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

namespace strata::engine {

class PartitionHold {
 public:
  // Every one of n partitions held.
  explicit PartitionHold(size_t n);

  // The partition the writer captures next: the first one an update waits for, else the lowest
  // one still held; nullopt when every partition is taken. It stays held until release().
  std::optional<size_t> pick();
  void release(size_t i);
  // Releases every partition (the writer stopped, done or failed).
  void release_all();
  // Blocks while partition i is held (the caller is about to change its state).
  void wait(size_t i) const;
  // Partitions some caller is waiting for now.
  size_t waiting() const;
  // Seconds callers spent in wait() so far (the update's exposed share of a checkpoint).
  double waited_seconds() const;

 private:
  enum class State : char { kHeld, kTaken, kReleased };
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<State> state_;
  mutable std::vector<size_t> wanted_;  // partitions waited for, in the order asked
  size_t next_ = 0;                     // no held partition below it (the default order)
  mutable double waited_s_ = 0.0;
};

}  // namespace strata::engine
