// Internal: the raw engines behind IoQueue (io_uring, pread/pwrite thread pool). A backend does
// single operations and reports raw results (bytes or -errno); IoQueue does the rest.
// Thread safety: as IoQueue (one submitting thread).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "nvme/io_queue.h"

namespace strata::nvme::detail {

struct RawOp {
  int fd = -1;
  bool write = false;
  void* buffer = nullptr;
  size_t size_bytes = 0;
  uint64_t offset = 0;
  uint64_t slot = 0;
  int fixed_index = -1;  // registered buffer index, or -1
};

struct RawCompletion {
  uint64_t slot = 0;
  int64_t result = 0;  // bytes, or -errno
};

// EINTR and EAGAIN/EBUSY are retried; this is the one place that decides it.
inline bool is_transient_error(int64_t negative_errno) {
  return negative_errno == -4 /*EINTR*/ || negative_errno == -11 /*EAGAIN*/ ||
         negative_errno == -16 /*EBUSY*/;
}

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  virtual Status prepare(const RawOp& op) = 0;
  virtual Status submit() = 0;
  // With wait_one, blocks until a completion is ready or wake() is called (then `out` may stay
  // empty).
  virtual Status wait(std::vector<RawCompletion>& out, bool wait_one) = 0;
  // Thread-safe: ends a wait in progress, or the next one, early.
  virtual void wake() = 0;
  // Ok(true) registered, Ok(false) refused (the caller steps down), error otherwise.
  virtual Result<bool> register_buffers(std::span<const iovec> regions, std::string& note) = 0;
  virtual IoEngine engine() const = 0;
  virtual std::string describe() const = 0;
};

// Returns an error whose message says why io_uring is not available (the caller may step down).
Result<std::unique_ptr<IoBackend>> make_uring_backend(uint32_t depth);
std::unique_ptr<IoBackend> make_thread_pool_backend(int threads);

}  // namespace strata::nvme::detail
