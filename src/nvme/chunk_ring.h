// ChunkRing: what DirectWriter and DirectReader share. One file opened with O_DIRECT (or through
// the page cache where the filesystem refuses it, or when asked), an IoQueue as deep as there are
// chunks, `chunks` 4 KiB-aligned chunks of `chunk_bytes` each, which of them has a request in
// flight, and the first failure (kept: every later call returns it). Internal to nvme/.
// The chunks are one buffer on transparent huge pages (cpu::PinnedPool, not page-locked): a 4 MiB
// request from 4 KiB pages is 1024 DMA segments, more than a virtio disk takes in one request
// (254 on this project's test machine), and such writes ran at about half the rate.
// Thread safety: one thread at a time; the destructor waits for requests in flight.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "cpu/pinned_memory.h"
#include "nvme/io_queue.h"

namespace strata::nvme::detail {

class ChunkRing {
 public:
  // Opens `path` with `flags` (plus O_DIRECT when `direct`, stepping down on EINVAL). kConfig for
  // chunks that are not whole blocks or over 1 GiB, kIo naming the file when it cannot be opened.
  Status open(const std::string& path, int flags, bool direct, size_t chunk_bytes, uint32_t chunks);
  ChunkRing() = default;
  ChunkRing(const ChunkRing&) = delete;
  ChunkRing& operator=(const ChunkRing&) = delete;
  ~ChunkRing() { close(); }

  std::byte* chunk(uint32_t i) {
    return static_cast<std::byte*>(mem_.data()) + size_t{i} * chunk_bytes_;
  }
  uint32_t chunks() const { return static_cast<uint32_t>(busy_.size()); }
  size_t chunk_bytes() const { return chunk_bytes_; }
  int fd() const { return fd_; }
  bool direct() const { return direct_; }
  const std::string& path() const { return path_; }
  const Status& failed() const { return failed_; }

  // Queues chunk i's request (`size` bytes at `offset`); it reaches the kernel on flush().
  Status queue(IoOp op, uint32_t i, size_t size, uint64_t offset);
  Status flush();
  // Reaps until chunk i's request is done; every request with i == chunks().
  Status wait(size_t i);
  // kIo naming the file, `what` and the text of `err` (errno by default); kept as the failure.
  Status fail(const char* what, int err = errno);
  // Waits for every request and closes the file (again: nothing).
  void close();
  // Test hook (IoQueue::set_fault_injection): the n-th completion from now is replaced.
  void set_fault_injection(FaultInjection fault) {
    if (queue_) queue_->set_fault_injection(fault);
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  // Before the queue: destroyed after it, so no request in flight outlives its chunk.
  cpu::PinnedBuffer mem_;
  std::optional<IoQueue> queue_;
  size_t chunk_bytes_ = 0;
  std::vector<bool> busy_;
  Status failed_;
  std::vector<IoCompletion> done_;
};

}  // namespace strata::nvme::detail
