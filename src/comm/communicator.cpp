#include "comm/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <thread>

#include "core/log.h"

namespace strata::comm {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kReduce: return "reduce";
    case CollectiveKind::kGather: return "gather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kScatter: return "scatter";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "?";
}

ByteCount textbook_bytes(const CollectiveCall& call, int rank, int size) {
  ByteCount b;
  if (size <= 1) return b;
  const uint64_t n = static_cast<uint64_t>(size);
  const uint64_t s = static_cast<uint64_t>(call.count) * dtype_size(call.dtype);
  const bool is_root = rank == call.root;
  switch (call.kind) {
    case CollectiveKind::kAllReduce: b.sent = b.received = 2 * (n - 1) * s / n; break;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather: b.sent = b.received = (n - 1) * s; break;
    case CollectiveKind::kBroadcast:
      b.received = is_root ? 0 : s;
      b.sent = rank == (call.root + size - 1) % size ? 0 : s;
      break;
    case CollectiveKind::kReduce:
      b.sent = is_root ? 0 : s;
      b.received = rank == (call.root + 1) % size ? 0 : s;
      break;
    case CollectiveKind::kGather:
      b.sent = is_root ? 0 : s;
      b.received = is_root ? (n - 1) * s : 0;
      break;
    case CollectiveKind::kScatter:
      b.sent = is_root ? (n - 1) * s : 0;
      b.received = is_root ? 0 : s;
      break;
    case CollectiveKind::kBarrier: break;
  }
  return b;
}

CommOptions CommOptions::from_env() {
  CommOptions o;
  if (const char* t = std::getenv("STRATA_COMM_TIMEOUT_S"); t != nullptr && *t != '\0') {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    if (end != t && *end == '\0' && v >= 0.0) {
      o.timeout_s = v;
    } else {
      STRATA_LOG(kWarn, "STRATA_COMM_TIMEOUT_S='"
                            << t << "' is not a number of seconds >= 0; using " << o.timeout_s);
    }
  }
  if (const char* c = std::getenv("STRATA_COMM_CHECK"); c != nullptr && *c != '\0') {
    o.check_calls = std::string_view(c) != "0";
  }
  return o;
}

std::string describe_call(const CollectiveCall& call, uint64_t sequence) {
  std::ostringstream os;
  os << collective_name(call.kind) << " #" << sequence;
  if (call.kind != CollectiveKind::kBarrier) {
    os << " (count " << call.count << ", " << dtype_name(call.dtype);
    if (call.kind == CollectiveKind::kReduce || call.kind == CollectiveKind::kReduceScatter ||
        call.kind == CollectiveKind::kAllReduce) {
      os << ", " << reduce_op_name(call.op);
    }
    if (call.kind == CollectiveKind::kReduce || call.kind == CollectiveKind::kGather ||
        call.kind == CollectiveKind::kBroadcast || call.kind == CollectiveKind::kScatter) {
      os << ", root " << call.root;
    }
    os << ")";
  }
  return os.str();
}

void Backoff::pause() {
  // MPI progresses a collective's rounds only inside MPI calls (a large message takes hundreds
  // of rounds), so polling must stay frequent, as MPI_Wait's own busy-poll does: yield (other
  // ranks sharing the core run) for the first kYieldS seconds, then sleep with a back-off of
  // 20 us doubling to 100 us.
  constexpr double kYieldS = 1.0;
  const auto now = std::chrono::steady_clock::now();
  if (spins_ == 0) start_ = now;
  ++spins_;
  if (std::chrono::duration<double>(now - start_).count() < kYieldS) {
    std::this_thread::yield();
    return;
  }
  sleep_us_ = sleep_us_ == 0 ? 20 : std::min(sleep_us_ * 2, 100);
  std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
}

// ---- CommHandle ----

CommHandle::CommHandle(std::unique_ptr<PendingOp> op, Communicator* comm, CollectiveCall call,
                       uint64_t sequence)
    : op_(std::move(op)), comm_(comm), call_(call), sequence_(sequence), done_(false) {}

CommHandle::CommHandle(CommHandle&& other) noexcept { *this = std::move(other); }

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    release();
    op_ = std::move(other.op_);
    comm_ = other.comm_;
    call_ = other.call_;
    sequence_ = other.sequence_;
    done_ = other.done_;
    status_ = std::move(other.status_);
    other.done_ = true;
    other.status_ = ok_status();
  }
  return *this;
}

CommHandle::~CommHandle() { release(); }

void CommHandle::release() {
  if (!done_) {
    const Status s = wait();
    if (!s.ok()) STRATA_LOG(kError, "unwaited collective failed: " << s.to_string());
  }
  op_.reset();
}

bool CommHandle::test() {
  if (done_) return true;
  bool done = false;
  Status s = op_->poll(done);
  if (done || !s.ok()) {
    done_ = true;
    status_ = std::move(s);
    op_.reset();
  }
  return done_;
}

Status CommHandle::wait() {
  if (done_) return status_;
  const double timeout_s = comm_ != nullptr ? comm_->options().timeout_s : 0.0;
  const auto start = std::chrono::steady_clock::now();
  Backoff backoff;
  while (!test()) {
    if (timeout_s > 0.0) {
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_s) {
        comm_->abort(make_error(ErrorCode::kComm, describe_call(call_, sequence_),
                                " did not complete within ", timeout_s, " s on rank ",
                                comm_->rank(), " of ", comm_->size(),
                                " (a peer failed or did not call it)"));
      }
    }
    backoff.pause();
  }
  return status_;
}

// ---- Communicator ----

Status Communicator::validate(const CollectiveCall& call) const {
  const std::string what(collective_name(call.kind));
  if (static_cast<uint8_t>(call.dtype) > static_cast<uint8_t>(DType::kBF16)) {
    return make_error(ErrorCode::kConfig, what, ": unknown dtype ", static_cast<int>(call.dtype));
  }
  if (call.op != ReduceOp::kSum && call.op != ReduceOp::kMax) {
    return make_error(ErrorCode::kConfig, what, ": unknown reduce op ", static_cast<int>(call.op));
  }
  if (call.kind == CollectiveKind::kBarrier) return ok_status();
  const int n = size();
  const bool rooted =
      call.kind == CollectiveKind::kReduce || call.kind == CollectiveKind::kGather ||
      call.kind == CollectiveKind::kBroadcast || call.kind == CollectiveKind::kScatter;
  if (rooted && (call.root < 0 || call.root >= n)) {
    return make_error(ErrorCode::kConfig, what, ": root ", call.root, " is not a rank (0..", n - 1,
                      ")");
  }
  const size_t max_elems = std::numeric_limits<size_t>::max() / 4 / static_cast<size_t>(n);
  if (call.count > max_elems) {
    return make_error(ErrorCode::kConfig, what, ": count ", call.count, " is too large");
  }
  if (call.count == 0) return ok_status();
  const bool me_root = rank() == call.root;
  bool need_send = true;
  bool need_recv = true;
  switch (call.kind) {
    case CollectiveKind::kReduce: need_recv = me_root; break;
    case CollectiveKind::kGather: need_recv = me_root; break;
    case CollectiveKind::kScatter: need_send = me_root; break;
    case CollectiveKind::kBroadcast: need_send = false; break;
    default: break;
  }
  if (need_send && call.send == nullptr) {
    return make_error(ErrorCode::kConfig, what, ": send buffer is null with count ", call.count);
  }
  if (need_recv && call.recv == nullptr) {
    return make_error(ErrorCode::kConfig, what, ": receive buffer is null with count ", call.count);
  }
  return ok_status();
}

Status Communicator::admit(const CollectiveCall& call, uint64_t& seq) {
  Status valid = validate(call);
  if (!options_.check_calls && !valid.ok()) return valid;
  seq = sequence_++;
  if (options_.check_calls) {
    // Every rank joins the agreement, also one whose arguments are invalid, so that all of them
    // learn about the error instead of the others waiting for it.
    Status agreed = verify_call(call, valid.ok());
    if (!valid.ok()) return valid;
    if (!agreed.ok()) return agreed.with_context(describe_call(call, seq));
  }
  return ok_status();
}

void Communicator::count(const CollectiveCall& call) {
  const ByteCount b = textbook_bytes(call, rank(), size());
  std::lock_guard<std::mutex> lock(stats_mutex_);
  CollectiveStats& st = stats_[static_cast<size_t>(call.kind)];
  ++st.calls;
  st.bytes_sent += b.sent;
  st.bytes_received += b.received;
}

CommHandle Communicator::start(const CollectiveCall& call) {
  uint64_t seq = 0;
  Status admitted = admit(call, seq);
  if (!admitted.ok()) return CommHandle(std::move(admitted));
  auto op = start_impl(call);
  if (!op.ok()) return CommHandle(op.status().with_context(describe_call(call, seq)));
  count(call);
  if (*op == nullptr) return CommHandle(ok_status());  // finished synchronously
  return CommHandle(std::move(op).value(), this, call, seq);
}

Status Communicator::enqueue(const CollectiveCall& call, void* stream) {
  uint64_t seq = 0;
  STRATA_RETURN_IF_ERROR(admit(call, seq));
  Status st = enqueue_impl(call, seq, stream);
  if (!st.ok()) return st.with_context(describe_call(call, seq));
  count(call);
  return ok_status();
}

CommHandle Communicator::all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                          ReduceOp op) {
  return start({CollectiveKind::kAllReduce, send, recv, count, dtype, op, 0});
}
CommHandle Communicator::reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                      int root, ReduceOp op) {
  return start({CollectiveKind::kReduce, send, recv, count, dtype, op, root});
}
CommHandle Communicator::broadcast_async(void* buf, size_t count, DType dtype, int root) {
  return start({CollectiveKind::kBroadcast, buf, buf, count, dtype, ReduceOp::kSum, root});
}
CommHandle Communicator::reduce_scatter_async(const void* send, void* recv, size_t shard_count,
                                              DType dtype, ReduceOp op) {
  return start({CollectiveKind::kReduceScatter, send, recv, shard_count, dtype, op, 0});
}
CommHandle Communicator::all_gather_async(const void* send, void* recv, size_t shard_count,
                                          DType dtype) {
  return start({CollectiveKind::kAllGather, send, recv, shard_count, dtype, ReduceOp::kSum, 0});
}
CommHandle Communicator::gather_async(const void* send, void* recv, size_t shard_count, DType dtype,
                                      int root) {
  return start({CollectiveKind::kGather, send, recv, shard_count, dtype, ReduceOp::kSum, root});
}
CommHandle Communicator::scatter_async(const void* send, void* recv, size_t shard_count,
                                       DType dtype, int root) {
  return start({CollectiveKind::kScatter, send, recv, shard_count, dtype, ReduceOp::kSum, root});
}
CommHandle Communicator::barrier_async() { return start({CollectiveKind::kBarrier}); }

Status Communicator::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                ReduceOp op) {
  return all_reduce_async(send, recv, count, dtype, op).wait();
}
Status Communicator::reduce(const void* send, void* recv, size_t count, DType dtype, int root,
                            ReduceOp op) {
  return reduce_async(send, recv, count, dtype, root, op).wait();
}
Status Communicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  return broadcast_async(buf, count, dtype, root).wait();
}
Status Communicator::reduce_scatter(const void* send, void* recv, size_t shard_count, DType dtype,
                                    ReduceOp op) {
  return reduce_scatter_async(send, recv, shard_count, dtype, op).wait();
}
Status Communicator::all_gather(const void* send, void* recv, size_t shard_count, DType dtype) {
  return all_gather_async(send, recv, shard_count, dtype).wait();
}
Status Communicator::gather(const void* send, void* recv, size_t shard_count, DType dtype,
                            int root) {
  return gather_async(send, recv, shard_count, dtype, root).wait();
}
Status Communicator::scatter(const void* send, void* recv, size_t shard_count, DType dtype,
                             int root) {
  return scatter_async(send, recv, shard_count, dtype, root).wait();
}
Status Communicator::barrier() { return barrier_async().wait(); }

CollectiveStats Communicator::stats(CollectiveKind kind) const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_[static_cast<size_t>(kind)];
}

CollectiveStats Communicator::total_stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  CollectiveStats t;
  for (const auto& s : stats_) {
    t.calls += s.calls;
    t.bytes_sent += s.bytes_sent;
    t.bytes_received += s.bytes_received;
  }
  return t;
}

void Communicator::reset_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_ = {};
}

}  // namespace strata::comm
