#include "nvme/direct_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvme/chunk_ring.h"

namespace strata::nvme {

namespace {
constexpr uint64_t kBlock = 4096;
}

struct DirectReader::Impl {
  detail::ChunkRing ring;
  uint64_t size = 0;
  uint64_t body = 0;            // the part read through the queue: whole blocks when direct
  std::vector<size_t> len;      // per chunk: the bytes its read asks for
  uint64_t issued = 0;          // chunks asked for, in order (chunk k in slot k % chunks)
  uint64_t taken = 0;           // chunks copied out
  uint64_t next = 0;            // file offset of the next chunk to ask for
  size_t pos = 0;               // bytes copied out of chunk `taken`
  std::vector<std::byte> tail;  // the last, partial block, once read
  size_t tail_pos = 0;

  uint32_t slot(uint64_t k) const { return static_cast<uint32_t>(k % ring.chunks()); }

  // Asks for chunks while a slot is free and the body is not all asked for.
  Status ask() {
    bool any = false;
    while (next < body && issued - taken < ring.chunks()) {
      const uint32_t i = slot(issued);
      len[i] = static_cast<size_t>(std::min<uint64_t>(ring.chunk_bytes(), body - next));
      STRATA_RETURN_IF_ERROR(ring.queue(IoOp::kRead, i, len[i], next));
      next += len[i];
      ++issued;
      any = true;
    }
    return any ? ring.flush() : ring.failed();
  }

  // The last, partial block (direct reads cover whole blocks): an ordinary read.
  Status read_tail() {
    tail.resize(static_cast<size_t>(size - body));
    const int fd = ::open(ring.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ring.fail("cannot open to read its end");
    size_t have = 0;
    Status st;
    while (have < tail.size() && st.ok()) {
      const ssize_t k =
          ::pread(fd, tail.data() + have, tail.size() - have, static_cast<off_t>(body + have));
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) st = ring.fail("read failed");
      if (k == 0) st = ring.fail("shorter than when opened", ENODATA);
      if (k > 0) have += static_cast<size_t>(k);
    }
    ::close(fd);
    return st;
  }
};

Result<DirectReader> DirectReader::open(const std::string& path,
                                        const DirectReaderOptions& options) {
  auto impl = std::make_unique<Impl>();
  STRATA_RETURN_IF_ERROR(impl->ring.open(path, O_RDONLY | O_CLOEXEC, options.direct,
                                         options.chunk_bytes, options.chunks));
  struct stat sb {};
  if (::fstat(impl->ring.fd(), &sb) != 0) return impl->ring.fail("cannot stat");
  impl->size = static_cast<uint64_t>(sb.st_size);
  impl->body = impl->ring.direct() ? impl->size / kBlock * kBlock : impl->size;
  impl->len.assign(options.chunks, 0);
  STRATA_RETURN_IF_ERROR(impl->ask());
  return DirectReader(std::move(impl));
}

DirectReader::DirectReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DirectReader::DirectReader(DirectReader&&) noexcept = default;
DirectReader& DirectReader::operator=(DirectReader&&) noexcept = default;
DirectReader::~DirectReader() = default;

uint64_t DirectReader::size() const { return impl_->size; }
bool DirectReader::direct() const { return impl_->ring.direct(); }
void DirectReader::set_fault_injection(FaultInjection fault) {
  impl_->ring.set_fault_injection(fault);
}

Result<size_t> DirectReader::read(void* to, size_t n) {
  Impl& r = *impl_;
  STRATA_RETURN_IF_ERROR(r.ring.failed());
  auto* out = static_cast<std::byte*>(to);
  size_t copied = 0;
  while (copied < n && r.taken < r.issued) {
    const uint32_t i = r.slot(r.taken);
    STRATA_RETURN_IF_ERROR(r.ring.wait(i));
    const size_t take = std::min(n - copied, r.len[i] - r.pos);
    std::memcpy(out + copied, r.ring.chunk(i) + r.pos, take);
    copied += take;
    r.pos += take;
    if (r.pos == r.len[i]) {
      r.pos = 0;
      ++r.taken;
      STRATA_RETURN_IF_ERROR(r.ask());
    }
  }
  if (copied < n && r.taken == r.issued && r.body < r.size) {
    if (r.tail.empty()) STRATA_RETURN_IF_ERROR(r.read_tail());
    const size_t take = std::min(n - copied, r.tail.size() - r.tail_pos);
    std::memcpy(out + copied, r.tail.data() + r.tail_pos, take);
    copied += take;
    r.tail_pos += take;
  }
  return copied;
}

}  // namespace strata::nvme
