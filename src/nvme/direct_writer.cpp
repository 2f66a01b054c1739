#include "nvme/direct_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "nvme/io_queue.h"

namespace strata::nvme {

namespace {
constexpr size_t kBlock = 4096;
}

struct DirectWriter::Impl {
  std::string path;
  int fd = -1;
  bool direct = false;
  std::optional<IoQueue> queue;
  std::unique_ptr<std::byte, decltype(&std::free)> mem{nullptr, &std::free};
  size_t chunk_bytes = 0;
  std::vector<bool> busy;  // per chunk: a write in flight
  uint32_t cur = 0;        // the chunk being filled
  size_t fill = 0;         // its bytes
  uint64_t offset = 0;     // where it goes in the file
  uint64_t bytes = 0;      // appended in all
  Status failed;
  std::vector<IoCompletion> done;

  std::byte* chunk(uint32_t i) { return mem.get() + size_t{i} * chunk_bytes; }

  Status error(const char* what) const {
    return make_error(ErrorCode::kIo, path, ": ", what, ": ", std::strerror(errno));
  }

  // Reaps completions until chunk i is free (every chunk with i == busy.size()).
  Status wait(size_t i) {
    auto pending = [&] {
      return i < busy.size() ? static_cast<bool>(busy[i])
                             : std::find(busy.begin(), busy.end(), true) != busy.end();
    };
    while (pending()) {
      done.clear();
      Status st = queue->reap(done, /*wait=*/true);
      if (!st.ok()) failed = st.with_context(path);
      for (const IoCompletion& c : done) {
        busy[c.tag] = false;
        if (!c.status.ok() && failed.ok()) failed = c.status.with_context(path);
      }
      if (!st.ok()) break;
    }
    return failed;
  }

  // Writes the current chunk (`size` bytes, a multiple of the block) and moves to the next.
  Status submit(size_t size) {
    IoRequest r;
    r.fd = fd;
    r.op = IoOp::kWrite;
    r.buffer = chunk(cur);
    r.size_bytes = size;
    r.offset = offset;
    r.tag = cur;
    Status st = queue->submit(r);
    if (st.ok()) st = queue->flush();
    if (!st.ok()) return failed = st.with_context(path);
    busy[cur] = true;
    offset += size;
    cur = (cur + 1) % static_cast<uint32_t>(busy.size());
    fill = 0;
    return wait(cur);
  }

  void close_fd() {
    if (fd < 0) return;
    if (queue) (void)wait(busy.size());
    ::close(fd);
    fd = -1;
  }
};

Result<DirectWriter> DirectWriter::create(const std::string& path,
                                          const DirectWriterOptions& options) {
  if (options.chunk_bytes == 0 || options.chunk_bytes % kBlock != 0 || options.chunks == 0) {
    return make_error(ErrorCode::kConfig, path, ": direct writer chunks of ", options.chunk_bytes,
                      " bytes x ", options.chunks, " (need a multiple of 4096, at least one)");
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  if (options.direct) impl->fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
  impl->direct = impl->fd >= 0;
  if (!options.direct || (impl->fd < 0 && errno == EINVAL)) {
    impl->fd = ::open(path.c_str(), flags, 0644);
  }
  if (impl->fd < 0) return impl->error("cannot create");
  IoQueueOptions qo;
  qo.queue_depth = options.chunks;
  qo.fixed_buffers = false;
  auto q = IoQueue::create(qo);
  if (!q.ok()) {
    ::close(impl->fd);
    return q.status().with_context(path);
  }
  impl->queue.emplace(std::move(*q));
  impl->chunk_bytes = options.chunk_bytes;
  impl->mem.reset(
      static_cast<std::byte*>(std::aligned_alloc(kBlock, options.chunk_bytes * options.chunks)));
  impl->busy.assign(options.chunks, false);
  if (!impl->mem) {
    ::close(impl->fd);
    return make_error(ErrorCode::kIo, path, ": cannot allocate ",
                      options.chunk_bytes * options.chunks, " bytes of write buffers");
  }
  return DirectWriter(std::move(impl));
}

DirectWriter::DirectWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DirectWriter::DirectWriter(DirectWriter&&) noexcept = default;
DirectWriter& DirectWriter::operator=(DirectWriter&& o) noexcept {
  if (impl_) impl_->close_fd();
  impl_ = std::move(o.impl_);
  return *this;
}
DirectWriter::~DirectWriter() {
  if (impl_) impl_->close_fd();
}

uint64_t DirectWriter::bytes() const { return impl_->bytes; }
bool DirectWriter::direct() const { return impl_->direct; }

Status DirectWriter::append(const void* data, size_t n) {
  Impl& w = *impl_;
  STRATA_RETURN_IF_ERROR(w.failed);
  if (w.fd < 0) return make_error(ErrorCode::kInternal, w.path, ": append after finish");
  const auto* p = static_cast<const std::byte*>(data);
  while (n > 0) {
    const size_t take = std::min(n, w.chunk_bytes - w.fill);
    std::memcpy(w.chunk(w.cur) + w.fill, p, take);
    w.fill += take;
    w.bytes += take;
    p += take;
    n -= take;
    if (w.fill == w.chunk_bytes) STRATA_RETURN_IF_ERROR(w.submit(w.chunk_bytes));
  }
  return ok_status();
}

Status DirectWriter::finish(bool sync) {
  Impl& w = *impl_;
  if (w.fd < 0) return make_error(ErrorCode::kInternal, w.path, ": finished twice");
  Status st = w.failed;
  if (st.ok() && w.fill > 0) {
    const size_t padded = (w.fill + kBlock - 1) / kBlock * kBlock;
    std::memset(w.chunk(w.cur) + w.fill, 0, padded - w.fill);
    st = w.submit(padded);
  }
  if (st.ok()) st = w.wait(w.busy.size());
  if (st.ok() && ::ftruncate(w.fd, static_cast<off_t>(w.bytes)) != 0) st = w.error("truncate");
  if (st.ok() && sync && ::fsync(w.fd) != 0) st = w.error("fsync");
  w.close_fd();
  return st;
}

}  // namespace strata::nvme
