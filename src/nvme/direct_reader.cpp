#include "nvme/direct_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvme/io_queue.h"

namespace strata::nvme {

namespace {
constexpr uint64_t kBlock = 4096;
}

struct DirectReader::Impl {
  std::string path;
  int fd = -1;
  bool direct = false;
  std::optional<IoQueue> queue;
  std::unique_ptr<std::byte, decltype(&std::free)> mem{nullptr, &std::free};
  size_t chunk_bytes = 0;
  uint64_t size = 0;
  uint64_t body = 0;  // the part read through the queue: whole blocks when direct
  std::vector<bool> busy;
  std::vector<size_t> len;  // per chunk: the bytes its read asks for
  uint64_t issued = 0;      // chunks asked for, in order (chunk k in slot k % chunks)
  uint64_t taken = 0;       // chunks copied out
  uint64_t next = 0;        // file offset of the next chunk to ask for
  size_t pos = 0;           // bytes copied out of chunk `taken`
  std::vector<std::byte> tail;
  bool tail_read = false;
  size_t tail_pos = 0;
  Status failed;
  std::vector<IoCompletion> done;

  uint32_t slot(uint64_t k) const { return static_cast<uint32_t>(k % busy.size()); }
  std::byte* chunk(uint32_t i) { return mem.get() + size_t{i} * chunk_bytes; }

  Status error(const char* what) const {
    return make_error(ErrorCode::kIo, path, ": ", what, ": ", std::strerror(errno));
  }

  // Asks for chunks while a slot is free and the body is not all asked for.
  Status ask() {
    bool any = false;
    while (failed.ok() && next < body && issued - taken < busy.size()) {
      const uint32_t i = slot(issued);
      IoRequest r;
      r.fd = fd;
      r.op = IoOp::kRead;
      r.buffer = chunk(i);
      r.size_bytes = static_cast<size_t>(std::min<uint64_t>(chunk_bytes, body - next));
      r.offset = next;
      r.tag = i;
      Status st = queue->submit(r);
      if (!st.ok()) return failed = st.with_context(path);
      busy[i] = true;
      len[i] = r.size_bytes;
      next += r.size_bytes;
      ++issued;
      any = true;
    }
    if (any) {
      Status st = queue->flush();
      if (!st.ok()) failed = st.with_context(path);
    }
    return failed;
  }

  // Reaps until slot i's read is done (every read when i == busy.size()).
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

  void close_fd() {
    if (fd < 0) return;
    if (queue) (void)wait(busy.size());
    ::close(fd);
    fd = -1;
  }
};

Result<DirectReader> DirectReader::open(const std::string& path,
                                        const DirectReaderOptions& options) {
  if (options.chunk_bytes == 0 || options.chunk_bytes % kBlock != 0 || options.chunks == 0) {
    return make_error(ErrorCode::kConfig, path, ": direct reader chunks of ", options.chunk_bytes,
                      " bytes x ", options.chunks, " (need a multiple of 4096, at least one)");
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  if (options.direct) impl->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  impl->direct = impl->fd >= 0;
  if (!options.direct || (impl->fd < 0 && errno == EINVAL)) {
    impl->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (impl->fd < 0) return impl->error("cannot open");
  struct stat sb {};
  if (::fstat(impl->fd, &sb) != 0) {
    Status st = impl->error("cannot stat");
    ::close(impl->fd);
    return st;
  }
  impl->size = static_cast<uint64_t>(sb.st_size);
  impl->body = impl->direct ? impl->size / kBlock * kBlock : impl->size;
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
  if (!impl->mem) {
    ::close(impl->fd);
    return make_error(ErrorCode::kIo, path, ": cannot allocate ",
                      options.chunk_bytes * options.chunks, " bytes of read buffers");
  }
  impl->busy.assign(options.chunks, false);
  impl->len.assign(options.chunks, 0);
  STRATA_RETURN_IF_ERROR(impl->ask());
  return DirectReader(std::move(impl));
}

DirectReader::DirectReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DirectReader::DirectReader(DirectReader&&) noexcept = default;
DirectReader& DirectReader::operator=(DirectReader&& o) noexcept {
  if (impl_) impl_->close_fd();
  impl_ = std::move(o.impl_);
  return *this;
}
DirectReader::~DirectReader() {
  if (impl_) impl_->close_fd();
}

uint64_t DirectReader::size() const { return impl_->size; }
bool DirectReader::direct() const { return impl_->direct; }

Result<size_t> DirectReader::read(void* to, size_t n) {
  Impl& r = *impl_;
  STRATA_RETURN_IF_ERROR(r.failed);
  auto* out = static_cast<std::byte*>(to);
  size_t copied = 0;
  while (copied < n && r.taken < r.issued) {
    const uint32_t i = r.slot(r.taken);
    STRATA_RETURN_IF_ERROR(r.wait(i));
    const size_t take = std::min(n - copied, r.len[i] - r.pos);
    std::memcpy(out + copied, r.chunk(i) + r.pos, take);
    copied += take;
    r.pos += take;
    if (r.pos == r.len[i]) {
      r.pos = 0;
      ++r.taken;
      STRATA_RETURN_IF_ERROR(r.ask());
    }
  }
  if (copied < n && r.taken == r.issued && r.body < r.size) {  // the last, partial block
    if (!r.tail_read) {
      r.tail.resize(static_cast<size_t>(r.size - r.body));
      r.tail_read = true;
      const int fd = ::open(r.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return r.failed = r.error("cannot open to read its end");
      size_t have = 0;
      while (have < r.tail.size()) {
        const ssize_t k = ::pread(fd, r.tail.data() + have, r.tail.size() - have,
                                  static_cast<off_t>(r.body + have));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
          r.failed = k < 0 ? r.error("read failed")
                           : make_error(ErrorCode::kIo, r.path, ": shorter than when opened");
          ::close(fd);
          return r.failed;
        }
        have += static_cast<size_t>(k);
      }
      ::close(fd);
    }
    const size_t take = std::min(n - copied, r.tail.size() - r.tail_pos);
    std::memcpy(out + copied, r.tail.data() + r.tail_pos, take);
    copied += take;
    r.tail_pos += take;
  }
  return copied;
}

}  // namespace strata::nvme
