#include "nvme/io_queue.h"

#include <cstring>

#include "core/log.h"
#include "nvme/io_backend.h"

namespace strata::nvme {

std::string_view io_engine_name(IoEngine engine) {
  switch (engine) {
    case IoEngine::kAuto: return "auto";
    case IoEngine::kUring: return "io_uring";
    case IoEngine::kThreadPool: return "thread pool";
  }
  return "?";
}

Result<IoQueue> IoQueue::create(const IoQueueOptions& options) {
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    return make_error(ErrorCode::kConfig, "io queue depth ", options.queue_depth,
                      " is not accepted (1..4096)");
  }
  if (options.thread_pool_threads < 1 || options.thread_pool_threads > 256) {
    return make_error(ErrorCode::kConfig, "io thread pool size ", options.thread_pool_threads,
                      " is not accepted (1..256)");
  }
  IoQueue q;
  q.options_ = options;
  q.depth_ = options.queue_depth;
  if (options.engine != IoEngine::kThreadPool) {
    auto uring = detail::make_uring_backend(options.queue_depth);
    if (uring.ok()) {
      q.backend_ = std::move(uring).value();
    } else if (options.engine == IoEngine::kUring) {
      return uring.status();
    } else {
      STRATA_LOG(kWarn, "nvme: " << uring.status().message()
                                 << "; stepping down to a pread/pwrite thread pool");
    }
  }
  if (!q.backend_) q.backend_ = detail::make_thread_pool_backend(options.thread_pool_threads);
  q.slots_.resize(q.depth_);
  for (uint32_t i = q.depth_; i > 0; --i) q.free_slots_.push_back(i - 1);
  return q;
}

IoQueue::IoQueue(IoQueue&&) noexcept = default;
IoQueue& IoQueue::operator=(IoQueue&&) noexcept = default;
IoQueue::~IoQueue() {
  // Drain what is in flight so no kernel write lands in freed memory.
  if (backend_ && in_flight_ > 0) {
    std::vector<IoCompletion> ignored;
    while (in_flight_ > 0) {
      if (!reap(ignored, true).ok()) break;
      ignored.clear();
    }
  }
}

IoEngine IoQueue::engine() const { return backend_->engine(); }

void IoQueue::wake() const { backend_->wake(); }

std::string IoQueue::describe() const {
  std::string s = backend_->describe() + ", depth " + std::to_string(depth_);
  if (backend_->engine() == IoEngine::kUring) {
    s += fixed_active_ ? ", fixed buffers" : ", plain buffers";
    if (!fixed_note_.empty()) s += " (" + fixed_note_ + ")";
  }
  return s;
}

Status IoQueue::register_buffers(std::span<const BufferRegion> regions) {
  if (in_flight_ != 0) {
    return make_error(ErrorCode::kInternal, "register_buffers with requests in flight");
  }
  regions_.assign(regions.begin(), regions.end());
  fixed_active_ = false;
  if (!options_.fixed_buffers) {
    fixed_note_ = "disabled by option";
    return ok_status();
  }
  std::vector<iovec> iov;
  for (const auto& r : regions) iov.push_back(iovec{r.data, r.size_bytes});
  STRATA_ASSIGN_OR_RETURN(bool ok, backend_->register_buffers(iov, fixed_note_));
  fixed_active_ = ok && !iov.empty();
  return ok_status();
}

int IoQueue::fixed_index(const void* buffer, size_t size_bytes) const {
  if (!fixed_active_) return -1;
  const auto* p = static_cast<const std::byte*>(buffer);
  for (size_t i = 0; i < regions_.size(); ++i) {
    const auto* b = static_cast<const std::byte*>(regions_[i].data);
    if (p >= b && p + size_bytes <= b + regions_[i].size_bytes) return static_cast<int>(i);
  }
  return -1;
}

Status IoQueue::issue(uint32_t slot) {
  Slot& s = slots_[slot];
  detail::RawOp op;
  op.fd = s.request.fd;
  op.write = s.request.op == IoOp::kWrite;
  op.buffer = static_cast<std::byte*>(s.request.buffer) + s.done_bytes;
  op.size_bytes = s.request.size_bytes - s.done_bytes;
  op.offset = s.request.offset + s.done_bytes;
  op.slot = slot;
  op.fixed_index = fixed_index(op.buffer, op.size_bytes);
  ++prepares_;
  if (fault_.prepare_nth != 0 && prepares_ == fault_.prepare_nth) {
    return make_error(ErrorCode::kIo, "io engine refused the request (injected fault)");
  }
  return backend_->prepare(op);
}

void IoQueue::release(uint32_t slot) {
  slots_[slot].active = false;
  free_slots_.push_back(slot);
  --in_flight_;
}

Status IoQueue::submit(const IoRequest& request) {
  if (!can_submit()) return make_error(ErrorCode::kInternal, "io queue full");
  if (request.size_bytes == 0) {
    return make_error(ErrorCode::kInternal, "io request of 0 bytes");
  }
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  slots_[slot] = Slot{request, 0, true};
  ++in_flight_;
  Status st = issue(slot);
  if (!st.ok()) release(slot);
  return st;
}

Status IoQueue::flush() { return backend_->submit(); }

Status IoQueue::reap(std::vector<IoCompletion>& out, bool wait) {
  const size_t before = out.size();
  std::vector<detail::RawCompletion> raw;
  while (in_flight_ > 0) {
    raw.clear();
    STRATA_RETURN_IF_ERROR(backend_->submit());
    STRATA_RETURN_IF_ERROR(backend_->wait(raw, wait && out.size() == before));
    if (raw.empty()) break;
    bool resubmitted = false;
    for (const auto& rc : raw) {
      const auto slot = static_cast<uint32_t>(rc.slot);
      Slot& s = slots_[slot];
      int64_t res = rc.result;
      const size_t want = s.request.size_bytes - s.done_bytes;
      ++raw_completions_;
      if (fault_.nth != 0 && raw_completions_ == fault_.nth) {
        switch (fault_.kind) {
          case FaultKind::kEio: res = -5; break;
          case FaultKind::kShort: res = static_cast<int64_t>((want / 2) & ~size_t{4095}); break;
          case FaultKind::kZero: res = 0; break;
        }
      }
      const char* what = s.request.op == IoOp::kWrite ? "write" : "read";
      const bool transient = res < 0 && detail::is_transient_error(res);
      const bool partial = res > 0 && static_cast<size_t>(res) < want;
      Status st;
      if (transient || partial) {
        // The rest goes back to the engine; if it refuses, the request fails here, reported
        // like any other completion, and the rest of the batch is still handled.
        if (partial) s.done_bytes += static_cast<size_t>(res);
        Status again = issue(slot);
        if (again.ok()) {
          resubmitted = true;
          continue;
        }
        st = make_error(ErrorCode::kIo, what, " of ", s.request.size_bytes - s.done_bytes,
                        " bytes at offset ", s.request.offset + s.done_bytes,
                        " could not be resubmitted: ", again.message());
      } else if (res < 0) {
        st = make_error(ErrorCode::kIo, what, " of ", want, " bytes at offset ",
                        s.request.offset + s.done_bytes, " failed: ", std::strerror(-res));
      } else if (res == 0) {
        st = make_error(ErrorCode::kIo, "short ", what, ": 0 of ", want, " bytes at offset ",
                        s.request.offset + s.done_bytes, " (end of file or device)");
      }
      out.push_back(IoCompletion{s.request.tag, std::move(st)});
      release(slot);
    }
    if (!wait || out.size() > before) {
      if (resubmitted) STRATA_RETURN_IF_ERROR(backend_->submit());
      break;
    }
  }
  return ok_status();
}

}  // namespace strata::nvme
