// io_uring engine (the only file that includes liburing.h, with nothing else in strata).
#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "nvme/io_backend.h"

namespace strata::nvme::detail {
namespace {

class UringBackend final : public IoBackend {
 public:
  UringBackend() = default;
  ~UringBackend() override {
    if (initialized_) io_uring_queue_exit(&ring_);
    if (wake_fd_ >= 0) close(wake_fd_);
  }
  UringBackend(const UringBackend&) = delete;
  UringBackend& operator=(const UringBackend&) = delete;

  // One entry more than the depth: the read of the wake-up eventfd.
  int init(uint32_t depth) {
    wake_fd_ = eventfd(0, EFD_CLOEXEC);
    if (wake_fd_ < 0) return -errno;
    const int rc = io_uring_queue_init(depth + 1, &ring_, 0);
    if (rc == 0) initialized_ = true;
    return rc;
  }

  void wake() override {
    const uint64_t one = 1;
    // A full counter (impossible in practice) still leaves the pending wake-up readable.
    [[maybe_unused]] const ssize_t n = write(wake_fd_, &one, sizeof one);
  }

  Status prepare(const RawOp& op) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      // The queue keeps in-flight requests <= entries, so this is a flush-worthy corner only.
      STRATA_RETURN_IF_ERROR(submit());
      sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return make_error(ErrorCode::kInternal, "io_uring submission queue full");
    }
    const auto n = static_cast<unsigned>(op.size_bytes);
    if (op.fixed_index >= 0) {
      if (op.write) {
        io_uring_prep_write_fixed(sqe, op.fd, op.buffer, n, op.offset, op.fixed_index);
      } else {
        io_uring_prep_read_fixed(sqe, op.fd, op.buffer, n, op.offset, op.fixed_index);
      }
    } else if (op.write) {
      io_uring_prep_write(sqe, op.fd, op.buffer, n, op.offset);
    } else {
      io_uring_prep_read(sqe, op.fd, op.buffer, n, op.offset);
    }
    io_uring_sqe_set_data64(sqe, op.slot);
    ++unsubmitted_;
    return ok_status();
  }

  Status submit() override {
    while (unsubmitted_ > 0) {
      const int rc = io_uring_submit(&ring_);
      if (rc < 0) {
        if (is_transient_error(rc)) continue;
        return make_error(ErrorCode::kIo, "io_uring_submit failed: ", std::strerror(-rc));
      }
      unsubmitted_ -= std::min<size_t>(unsubmitted_, static_cast<size_t>(rc));
    }
    return ok_status();
  }

  Status wait(std::vector<RawCompletion>& out, bool wait_one) override {
    io_uring_cqe* cqe = nullptr;
    if (wait_one) {
      // A read of the eventfd in the ring ends the wait when wake() writes to it.
      if (!wake_armed_) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) {
          STRATA_RETURN_IF_ERROR(submit());
          sqe = io_uring_get_sqe(&ring_);
        }
        if (sqe != nullptr) {
          io_uring_prep_read(sqe, wake_fd_, &wake_value_, sizeof wake_value_, 0);
          io_uring_sqe_set_data64(sqe, kWakeTag);
          ++unsubmitted_;
          STRATA_RETURN_IF_ERROR(submit());
          wake_armed_ = true;
        }
      }
      for (;;) {
        const int rc = io_uring_wait_cqe(&ring_, &cqe);
        if (rc == 0) break;
        if (is_transient_error(rc)) continue;
        return make_error(ErrorCode::kIo, "io_uring_wait_cqe failed: ", std::strerror(-rc));
      }
    }
    io_uring_cqe* batch[64];
    for (;;) {
      const unsigned n = io_uring_peek_batch_cqe(&ring_, batch, 64);
      for (unsigned i = 0; i < n; ++i) {
        const uint64_t tag = io_uring_cqe_get_data64(batch[i]);
        if (tag == kWakeTag) {
          wake_armed_ = false;  // consumed (or failed: armed again before the next wait)
          continue;
        }
        out.push_back(RawCompletion{tag, batch[i]->res});
      }
      io_uring_cq_advance(&ring_, n);
      if (n < 64) break;
    }
    return ok_status();
  }

  Result<bool> register_buffers(std::span<const iovec> regions, std::string& note) override {
    if (registered_) {
      io_uring_unregister_buffers(&ring_);
      registered_ = false;
    }
    if (regions.empty()) return false;
    const int rc =
        io_uring_register_buffers(&ring_, regions.data(), static_cast<unsigned>(regions.size()));
    if (rc == 0) {
      registered_ = true;
      note.clear();
      return true;
    }
    if (rc == -EPERM || rc == -ENOMEM || rc == -EFAULT || rc == -EOPNOTSUPP || rc == -EINVAL) {
      note = std::string("registration refused: ") + std::strerror(-rc);
      return false;
    }
    return make_error(ErrorCode::kIo, "io_uring_register_buffers failed: ", std::strerror(-rc));
  }

  IoEngine engine() const override { return IoEngine::kUring; }
  std::string describe() const override { return "io_uring"; }

 private:
  io_uring ring_{};
  bool initialized_ = false;
  bool registered_ = false;
  size_t unsubmitted_ = 0;
  static constexpr uint64_t kWakeTag = ~uint64_t{0};
  int wake_fd_ = -1;
  bool wake_armed_ = false;
  uint64_t wake_value_ = 0;
};

}  // namespace

Result<std::unique_ptr<IoBackend>> make_uring_backend(uint32_t depth) {
  auto b = std::make_unique<UringBackend>();
  const int rc = b->init(depth);
  if (rc != 0) {
    return make_error(ErrorCode::kUnsupported,
                      "io_uring is not available (io_uring_queue_init: ", std::strerror(-rc), ")");
  }
  return std::unique_ptr<IoBackend>(std::move(b));
}

}  // namespace strata::nvme::detail
