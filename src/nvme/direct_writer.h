// DirectWriter: a file written front to back in one go with O_DIRECT through an IoQueue. Appended
// bytes are copied into 4 KiB-aligned chunks, and each full chunk goes to the disk while the caller
// goes on: the caller pays one copy, the write overlaps its next work, and nothing is left in the
// page cache for the final fsync to write back (a buffered file written at page-cache speed
// leaves all of it). At most `chunks` chunks are in flight; append waits for the oldest when all
// are. The last chunk is padded to the block and the file truncated back to the bytes appended.
// Where the filesystem refuses O_DIRECT (EINVAL), or with direct = false, the same queue writes
// through the page cache.
// Errors (a failed or short write, ENOSPC) are kIo naming the file, the offset and errno's text,
// returned by the append or finish that sees them; the file is then left as it is (the caller
// removes it).
// Thread safety: one thread at a time; the destructor waits for writes in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "nvme/io_queue.h"

namespace strata::nvme {

struct DirectWriterOptions {
  size_t chunk_bytes = size_t{4} << 20;  // a multiple of 4096
  uint32_t chunks = 8;                   // writes in flight at most
  bool direct = true;                    // false: through the page cache
};

class DirectWriter {
 public:
  // Creates (truncates) `path`.
  static Result<DirectWriter> create(const std::string& path,
                                     const DirectWriterOptions& options = {});
  DirectWriter(DirectWriter&&) noexcept;
  DirectWriter& operator=(DirectWriter&&) noexcept;
  ~DirectWriter();

  Status append(const void* data, size_t n);
  // Writes what is left, waits for every write, truncates to bytes(), fsyncs unless !sync, and
  // closes. Call once.
  Status finish(bool sync = true);

  uint64_t bytes() const;
  bool direct() const;  // O_DIRECT (false: the filesystem refused it)
  // Test hook: the n-th completion of the queue from now on is replaced (IoQueue's).
  void set_fault_injection(FaultInjection fault);

 private:
  struct Impl;
  explicit DirectWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::nvme
