// IoQueue: asynchronous block I/O on file descriptors for ONE submitting thread (one ring per
// thread). Backed by io_uring when the kernel allows it, else by a pread/pwrite thread pool.
//
// The queue keeps at most queue_depth requests in flight, submits in batches (submit() queues,
// flush() hands the batch to the kernel), reaps by waiting for one completion and then draining
// whatever else is ready, resubmits the remainder of short reads and writes, and retries
// EINTR/EAGAIN (both from the syscalls and as completion results) in one place. A request is
// reported once, when all its bytes are done or it has failed.
//
// Step-down on refusal (logged once per queue in describe()): io_uring unavailable
// (ENOSYS/EPERM/...) -> thread pool; fixed buffers refused (EPERM/ENOMEM) -> plain buffers.
//
// Thread safety: none. An IoQueue is used by the thread that owns it (it is movable between
// threads while idle). Buffers must stay valid until their request is reaped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::nvme {

enum class IoEngine { kAuto, kUring, kThreadPool };
std::string_view io_engine_name(IoEngine engine);

struct IoQueueOptions {
  IoEngine engine = IoEngine::kAuto;  // kUring: fail instead of stepping down
  uint32_t queue_depth = 32;          // requests in flight, 1..4096
  bool fixed_buffers = true;          // use registered buffers when register_buffers() is called
  int thread_pool_threads = 4;        // workers of the thread-pool engine
};

enum class IoOp : uint8_t { kRead, kWrite };

struct IoRequest {
  int fd = -1;
  IoOp op = IoOp::kRead;
  void* buffer = nullptr;  // size_bytes bytes; aligned as the fd requires (O_DIRECT)
  size_t size_bytes = 0;
  uint64_t offset = 0;  // file offset in bytes
  uint64_t tag = 0;     // returned in the completion
};

struct IoCompletion {
  uint64_t tag = 0;
  Status status;  // ok, or kIo naming the operation, offset and errno
};

// Test hook: the n-th raw completion (1-based, counted from when the hook is set) is replaced.
enum class FaultKind {
  kEio,    // result -EIO
  kShort,  // a short result (half the bytes, 4 KiB aligned); the queue must resubmit the rest
  kZero,   // a result of 0 bytes: an unrecoverable short read/write
};
// Separately, the n-th hand-over of a request to the engine (a first submission or the
// resubmission of a short transfer's rest, counted likewise) can be made to fail, as a ring
// that refuses new entries would.
struct FaultInjection {
  uint64_t nth = 0;  // 0 disables
  FaultKind kind = FaultKind::kEio;
  uint64_t prepare_nth = 0;  // 0 disables
};

struct BufferRegion {
  void* data = nullptr;
  size_t size_bytes = 0;
};

namespace detail {
class IoBackend;
}

class IoQueue {
 public:
  static Result<IoQueue> create(const IoQueueOptions& options);
  IoQueue(IoQueue&&) noexcept;
  IoQueue& operator=(IoQueue&&) noexcept;
  ~IoQueue();

  // Registers staging buffers once as fixed buffers (io_uring); requests inside a region use
  // them. Refusal (EPERM/ENOMEM) steps down to plain buffers with a log line, not an error.
  // Only while nothing is in flight.
  Status register_buffers(std::span<const BufferRegion> regions);

  bool can_submit() const { return in_flight_ < depth_; }
  size_t in_flight() const { return in_flight_; }
  uint32_t queue_depth() const { return depth_; }

  // Queues one request (requires can_submit()); it reaches the kernel on flush(). On an error
  // the request was not queued and its slot is free again.
  Status submit(const IoRequest& request);
  Status flush();
  // Appends finished requests to `out`. With wait, blocks until at least one request is
  // finished (if any is in flight) or wake() is called, then drains what else is ready. A short
  // transfer whose rest cannot be handed back to the engine is reported as that request's
  // failure; an error returned here is the engine's own (nothing of the batch is lost to it).
  Status reap(std::vector<IoCompletion>& out, bool wait);
  // The one member safe to call from any thread: makes the owner's blocking reap() (the one in
  // progress, or else the next) return early, so that work handed to the owner thread reaches
  // the kernel without waiting for a completion.
  void wake() const;

  // Effective set-up, e.g. "io_uring, depth 32, fixed buffers".
  std::string describe() const;
  IoEngine engine() const;
  bool using_fixed_buffers() const { return fixed_active_; }

  void set_fault_injection(FaultInjection fault) {
    fault_ = fault;
    raw_completions_ = 0;
    prepares_ = 0;
  }

 private:
  IoQueue() = default;
  struct Slot {
    IoRequest request;
    size_t done_bytes = 0;
    bool active = false;
  };
  Status issue(uint32_t slot);
  void release(uint32_t slot);
  int fixed_index(const void* buffer, size_t size_bytes) const;

  std::unique_ptr<detail::IoBackend> backend_;
  IoQueueOptions options_;
  uint32_t depth_ = 0;
  size_t in_flight_ = 0;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<BufferRegion> regions_;
  bool fixed_active_ = false;
  std::string fixed_note_;
  FaultInjection fault_;
  uint64_t raw_completions_ = 0;
  uint64_t prepares_ = 0;
};

}  // namespace strata::nvme
