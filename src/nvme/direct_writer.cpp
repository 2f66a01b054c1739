#include "nvme/direct_writer.h"

#include <algorithm>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "nvme/chunk_ring.h"

namespace strata::nvme {

namespace {
constexpr size_t kBlock = 4096;
}

struct DirectWriter::Impl {
  detail::ChunkRing ring;
  uint32_t cur = 0;     // the chunk being filled
  size_t fill = 0;      // its bytes
  uint64_t offset = 0;  // where it goes in the file
  uint64_t bytes = 0;   // appended in all
  bool finished = false;

  // Writes the current chunk (`size` bytes, a multiple of the block) and waits until the next
  // one is free.
  Status submit(size_t size) {
    STRATA_RETURN_IF_ERROR(ring.queue(IoOp::kWrite, cur, size, offset));
    STRATA_RETURN_IF_ERROR(ring.flush());
    offset += size;
    cur = (cur + 1) % ring.chunks();
    fill = 0;
    return ring.wait(cur);
  }
};

Result<DirectWriter> DirectWriter::create(const std::string& path,
                                          const DirectWriterOptions& options) {
  auto impl = std::make_unique<Impl>();
  STRATA_RETURN_IF_ERROR(impl->ring.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                                         options.direct, options.chunk_bytes, options.chunks));
  return DirectWriter(std::move(impl));
}

DirectWriter::DirectWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DirectWriter::DirectWriter(DirectWriter&&) noexcept = default;
DirectWriter& DirectWriter::operator=(DirectWriter&&) noexcept = default;
DirectWriter::~DirectWriter() = default;

uint64_t DirectWriter::bytes() const { return impl_->bytes; }
bool DirectWriter::direct() const { return impl_->ring.direct(); }
void DirectWriter::set_fault_injection(FaultInjection fault) {
  impl_->ring.set_fault_injection(fault);
}

Status DirectWriter::append(const void* data, size_t n) {
  Impl& w = *impl_;
  STRATA_RETURN_IF_ERROR(w.ring.failed());
  if (w.finished) return make_error(ErrorCode::kInternal, w.ring.path(), ": append after finish");
  const auto* p = static_cast<const std::byte*>(data);
  while (n > 0) {
    const size_t take = std::min(n, w.ring.chunk_bytes() - w.fill);
    std::memcpy(w.ring.chunk(w.cur) + w.fill, p, take);
    w.fill += take;
    w.bytes += take;
    p += take;
    n -= take;
    if (w.fill == w.ring.chunk_bytes()) STRATA_RETURN_IF_ERROR(w.submit(w.fill));
  }
  return ok_status();
}

Status DirectWriter::finish(bool sync) {
  Impl& w = *impl_;
  if (w.finished) return make_error(ErrorCode::kInternal, w.ring.path(), ": finished twice");
  w.finished = true;
  Status st = w.ring.failed();
  if (st.ok() && w.fill > 0) {
    const size_t padded = (w.fill + kBlock - 1) / kBlock * kBlock;
    std::memset(w.ring.chunk(w.cur) + w.fill, 0, padded - w.fill);
    st = w.submit(padded);
  }
  if (st.ok()) st = w.ring.wait(w.ring.chunks());
  if (st.ok() && ::ftruncate(w.ring.fd(), static_cast<off_t>(w.bytes)) != 0) {
    st = w.ring.fail("truncate");
  }
  if (st.ok() && sync && ::fsync(w.ring.fd()) != 0) st = w.ring.fail("fsync");
  w.ring.close();
  return st;
}

}  // namespace strata::nvme
