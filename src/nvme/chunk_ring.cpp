#include "nvme/chunk_ring.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

namespace strata::nvme::detail {

namespace {
constexpr size_t kBlock = 4096;
constexpr size_t kMaxChunk = size_t{1} << 30;
}  // namespace

Status ChunkRing::open(const std::string& path, int flags, bool direct, size_t chunk_bytes,
                       uint32_t chunks) {
  path_ = path;
  if (chunk_bytes == 0 || chunk_bytes % kBlock != 0 || chunk_bytes > kMaxChunk || chunks == 0 ||
      chunks > 4096) {
    return make_error(ErrorCode::kConfig, path, ": direct I/O chunks of ", chunk_bytes, " bytes x ",
                      chunks, " (need a multiple of 4096 up to 1 GiB, 1 to 4096 of them)");
  }
  if (direct) fd_ = ::open(path.c_str(), flags | O_DIRECT, 0644);
  direct_ = fd_ >= 0;
  if (!direct || (fd_ < 0 && errno == EINVAL)) fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) return make_error(ErrorCode::kIo, path, ": cannot open: ", std::strerror(errno));
  IoQueueOptions qo;
  qo.queue_depth = chunks;
  qo.fixed_buffers = false;
  auto q = IoQueue::create(qo);
  if (!q.ok()) return q.status().with_context(path);
  queue_.emplace(std::move(*q));
  chunk_bytes_ = chunk_bytes;
  auto mem = cpu::allocate_io_buffer(chunk_bytes * chunks);
  if (!mem.ok()) return mem.status().with_context(path + ": I/O buffers");
  mem_ = std::move(*mem);
  busy_.assign(chunks, false);
  return ok_status();
}

Status ChunkRing::queue(IoOp op, uint32_t i, size_t size, uint64_t offset) {
  STRATA_RETURN_IF_ERROR(failed_);
  IoRequest r;
  r.fd = fd_;
  r.op = op;
  r.buffer = chunk(i);
  r.size_bytes = size;
  r.offset = offset;
  r.tag = i;
  const Status st = queue_->submit(r);
  if (!st.ok()) return failed_ = st.with_context(path_);
  busy_[i] = true;
  return ok_status();
}

Status ChunkRing::flush() {
  STRATA_RETURN_IF_ERROR(failed_);
  const Status st = queue_->flush();
  if (!st.ok()) failed_ = st.with_context(path_);
  return failed_;
}

Status ChunkRing::wait(size_t i) {
  auto pending = [&] {
    return i < busy_.size() ? static_cast<bool>(busy_[i])
                            : std::find(busy_.begin(), busy_.end(), true) != busy_.end();
  };
  while (pending()) {
    done_.clear();
    const Status st = queue_->reap(done_, /*wait=*/true);
    if (!st.ok() && failed_.ok()) failed_ = st.with_context(path_);
    for (const IoCompletion& c : done_) {
      busy_[c.tag] = false;
      if (!c.status.ok() && failed_.ok()) failed_ = c.status.with_context(path_);
    }
    if (!st.ok()) break;
  }
  return failed_;
}

Status ChunkRing::fail(const char* what, int err) {
  Status st = make_error(ErrorCode::kIo, path_, ": ", what, ": ", std::strerror(err));
  if (failed_.ok()) failed_ = st;
  return st;
}

void ChunkRing::close() {
  if (fd_ < 0) return;
  if (queue_) (void)wait(busy_.size());
  queue_.reset();  // after a failed reap: its teardown ends what is still in flight
  ::close(fd_);
  fd_ = -1;
}

}  // namespace strata::nvme::detail
