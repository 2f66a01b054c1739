// CpuStream and CpuEvent: the Stream/Event of a CpuDevice (DESIGN.md §3).
// A CpuStream owns one worker thread that runs its queue of work items in order; every Stream
// call enqueues and returns at once. A CpuEvent is a real completion point: record() enqueues a
// marker that bumps the event's completed generation when the worker reaches it; wait() enqueues a
// marker that blocks this stream's worker until the event reaches the generation recorded at the
// time of the wait() call (CUDA semantics: the most recent record()).
// Errors: the first error of any work item is kept (work after it still runs, so events keep
// completing) and returned by the next synchronize() of the stream, which clears it, or of an
// event recorded after it.
// Ownership: a CpuStream is owned by its caller through unique_ptr<Stream> and must be destroyed
// before its device; destruction drains the queue and joins the worker.
// Thread safety: enqueueing from one host thread at a time (as the Stream contract says);
// synchronize and CpuEvent::query/synchronize from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "gpu/device.h"

namespace strata::gpu {

class CpuDevice;

class CpuEvent final : public Event {
 public:
  bool query() override;
  Status synchronize() override;

  // Host side of record(): the generation the enqueued marker will complete.
  uint64_t next_generation();
  // Generation the last record() will complete (0 if never recorded).
  uint64_t recorded_generation();
  // Worker side: the marker for `generation` was reached with `error` (first error before it).
  void complete(uint64_t generation, const Status& error);
  // Worker side: blocks until `generation` has completed.
  void wait_for(uint64_t generation);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0;
  uint64_t completed_ = 0;
  Status error_;  // the error carried by the latest completion
};

class CpuStream final : public Stream {
 public:
  using Work = std::function<Status()>;

  explicit CpuStream(CpuDevice* device);
  ~CpuStream() override;

  Status copy(void* dst, const void* src, size_t bytes, CopyKind kind) override;
  Status memset(void* dst, int value, size_t bytes) override;
  Status record(Event& event) override;
  Status wait(Event& event) override;
  Status host_callback(std::function<void()> fn) override;
  Status synchronize() override;

  // Enqueues a work item (kernels use this); it runs on the worker thread in queue order.
  void enqueue(Work work);
  CpuDevice* device() const { return device_; }
  // Host callbacks enqueued on this stream so far (each a host round trip on a GPU).
  uint64_t host_callbacks() const { return host_callbacks_.load(); }
  // Host scratch owned by this stream, for the top level of a work item only (the worker runs
  // one item at a time): slot in [0, kScratchSlots), at least n floats, reused across items.
  static constexpr int kScratchSlots = 4;
  float* scratch(int slot, size_t n);

 private:
  std::atomic<uint64_t> host_callbacks_{0};
  void run();

  CpuDevice* device_;
  std::mutex mu_;
  std::condition_variable cv_work_;
  std::condition_variable cv_idle_;
  std::deque<Work> queue_;
  bool busy_ = false;
  bool stop_ = false;
  Status error_;  // first error since the last synchronize()
  std::vector<float> scratch_[kScratchSlots];
  std::thread worker_;
};

}  // namespace strata::gpu
