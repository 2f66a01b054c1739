// SwapStore: keyed, asynchronous swap space on one or more directories (ZeRO-Infinity's NVMe
// tier). Each directory holds one file whose space is reserved up front (fallocate), so a full
// disk is an error at open(), before training starts. Objects are split into fixed-size,
// 4 KiB-aligned extents allocated round-robin across the directories (striping); each extent's
// xxh3 checksum is kept and, unless switched off, verified on read. A checksum mismatch, an I/O
// error or an unrecoverable short transfer completes the handle with an error naming the file
// and offset.
//
// Each file ends in an owner record (swap_owner.h); open() first removes the files of runs that
// are gone from each directory and leaves those of live runs alone. The files are registered
// with core/interrupt.h, so that an interrupted exit removes them too.
//
// I/O runs on one thread owned by the store, with its own IoQueue (one ring per submitting
// thread), keeping up to queue_depth block-sized requests in flight across all pending
// operations. The same thread hashes a write's extents while their requests are in flight and
// verifies a read's extents as they complete, oldest operation first, a few MiB between two
// looks at the queue, so the queue is refilled while a deep batch is checked. Files are opened
// O_DIRECT; when the filesystem refuses (tmpfs), buffered I/O is used with one warning
// (SwapStoreOptions::direct_io = false forces that path).
//
// Buffers: with O_DIRECT, buffers must be 4 KiB aligned (the pinned pool's are); an odd size
// is fine (the tail goes through an internal bounce block, the caller's buffer is touched only
// within size_bytes). A buffer must stay valid, and not be modified (write) or read (read),
// until its handle completes.
//
// Thread safety: write/read/remove/locate may be called from any thread. Operations on the same
// key must be ordered by the caller (wait for a write before reading or rewriting that key).
// The destructor waits for all pending operations, then deletes the files.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "nvme/io_queue.h"

namespace strata::nvme {

inline constexpr size_t kSwapAlignment = 4096;

struct SwapStoreOptions {
  std::vector<std::string> dirs;    // at least one; `--nvme-path a,b`
  uint64_t capacity_bytes = 0;      // total reserved, split evenly over dirs
  uint64_t extent_bytes = 1 << 20;  // allocation unit, multiple of 4 KiB
  uint64_t block_bytes = 1 << 20;   // size of one I/O request, multiple of 4 KiB
  IoQueueOptions queue;             // engine, depth (default 32), fixed buffers
  bool direct_io = true;            // false forces buffered I/O
  bool verify_checksums = true;
};

// Splits "a,b,c" into directories (empty pieces are an error naming the flag value).
Result<std::vector<std::string>> parse_nvme_paths(const std::string& flag_value);

// Completion of one asynchronous operation. Copyable; all copies observe the same operation.
class IoHandle {
 public:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
  };
  IoHandle() = default;
  explicit IoHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}
  static IoHandle failed(Status status);

  bool valid() const { return state_ != nullptr; }
  bool ready() const;
  Status wait() const;  // blocks until complete; an invalid handle is an error

 private:
  std::shared_ptr<State> state_;
};

// How full the store kept its queue (cumulative since open): the I/O thread's time with requests
// submitted and not yet reaped, and the integral of their number over that time.
// in_flight_seconds / busy_seconds is the mean depth; near the queue depth, the store kept the
// device supplied (a request done but not yet reaped still counts, so it is an upper bound).
struct SwapQueueStats {
  double busy_seconds = 0;
  double in_flight_seconds = 0;
  uint64_t requests = 0;  // submitted, each block-sized or smaller
};

struct ExtentLocation {
  std::string path;
  uint64_t offset = 0;      // in the file
  uint64_t size_bytes = 0;  // user bytes in this extent
};

class SwapStore {
 public:
  static Result<std::unique_ptr<SwapStore>> open(const SwapStoreOptions& options);
  ~SwapStore();
  SwapStore(const SwapStore&) = delete;
  SwapStore& operator=(const SwapStore&) = delete;

  // Writes size_bytes from buffer under key (allocating extents the first time or when the
  // size changes). Out of reserved space is an error in the handle. Returns at once; with
  // checksums on, the I/O thread hashes each extent (xxh3) once its requests are submitted, so
  // the hashing overlaps the transfers.
  IoHandle write(uint64_t key, const void* buffer, size_t size_bytes);
  // Reads key into buffer; size_bytes must equal the size written.
  IoHandle read(uint64_t key, void* buffer, size_t size_bytes);
  Status remove(uint64_t key);
  // Staging buffers to register once as io_uring fixed buffers (replaces earlier ones). Waits
  // until the I/O thread is idle.
  Status register_buffers(std::vector<BufferRegion> regions);

  Result<std::vector<ExtentLocation>> locate(uint64_t key) const;
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  SwapQueueStats queue_stats() const;
  uint64_t used_bytes() const;
  bool direct_io() const { return direct_io_; }
  std::string describe() const;  // effective set-up, logged once at open
  const std::vector<std::string>& paths() const;
  // Test hook, forwarded to the I/O thread's queue (see IoQueue::set_fault_injection).
  void set_fault_injection(FaultInjection fault);

  struct Impl;

 private:
  explicit SwapStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  uint64_t capacity_bytes_ = 0;
  bool direct_io_ = true;
};

}  // namespace strata::nvme
