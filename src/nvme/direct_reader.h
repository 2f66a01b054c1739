// DirectReader: a file read front to back with O_DIRECT through an IoQueue, the counterpart of
// DirectWriter. Up to `chunks` aligned chunks are read ahead of the caller, who copies out of
// them; the last, partial block comes from an ordinary read. Where the filesystem refuses
// O_DIRECT (EINVAL), or with direct = false, the same queue reads through the page cache. A
// failed read is kIo naming the file, the offset and errno's text.
// Thread safety: one thread at a time; the destructor waits for reads in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "nvme/io_queue.h"

namespace strata::nvme {

struct DirectReaderOptions {
  size_t chunk_bytes = size_t{4} << 20;  // a multiple of 4096
  uint32_t chunks = 8;                   // reads in flight at most
  bool direct = true;                    // false: through the page cache
};

class DirectReader {
 public:
  // kIo naming the file when it cannot be opened.
  static Result<DirectReader> open(const std::string& path,
                                   const DirectReaderOptions& options = {});
  DirectReader(DirectReader&&) noexcept;
  DirectReader& operator=(DirectReader&&) noexcept;
  ~DirectReader();

  // Copies the next n bytes into `to`; fewer only at the end of the file.
  Result<size_t> read(void* to, size_t n);

  uint64_t size() const;  // the file's, when opened
  bool direct() const;    // O_DIRECT (false: the filesystem refused it)
  // Test hook: the n-th completion of the queue from now on is replaced (IoQueue's).
  void set_fault_injection(FaultInjection fault);

 private:
  struct Impl;
  explicit DirectReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::nvme
