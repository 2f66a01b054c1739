#include "comm/nccl_watchdog.h"

#include <utility>

namespace strata::comm {
namespace {
// How often the thread looks at the oldest collective: small against any timeout, and a query a
// poll costs next to nothing.
constexpr auto kPollInterval = std::chrono::milliseconds(20);
}  // namespace

NcclWatchdog::NcclWatchdog(ncclComm_t comm, int device,
                           std::function<void(const Status&)> on_failure)
    : comm_(comm), device_(device), on_failure_(std::move(on_failure)) {
  thread_ = std::thread([this] { run(); });
}

NcclWatchdog::~NcclWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (Watched& w : watched_) {
    cudaEventDestroy(w.before);
    cudaEventDestroy(w.after);
  }
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
}

cudaError_t NcclWatchdog::take_event(cudaEvent_t* event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_events_.empty()) {
      *event = free_events_.back();
      free_events_.pop_back();
      return cudaSuccess;
    }
  }
  return cudaEventCreateWithFlags(event, cudaEventDisableTiming);
}

void NcclWatchdog::give_back(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_events_.push_back(event);
}

Status NcclWatchdog::watch(cudaStream_t stream, const CollectiveCall& call, uint64_t seq,
                           double timeout_s, const std::function<Status()>& issue) {
  Watched w;
  w.call = call;
  w.seq = seq;
  w.timeout_s = timeout_s;
  auto failed = [&](cudaError_t rc) {
    return make_error(ErrorCode::kCuda, "watching ", describe_call(call, seq), ": ",
                      cudaGetErrorString(rc));
  };
  auto release = [&] {
    if (w.before != nullptr) give_back(w.before);
    if (w.after != nullptr) give_back(w.after);
  };
  // Both events exist before anything is queued, so that no error below leaves the collective
  // unwatched.
  cudaError_t rc = take_event(&w.before);
  if (rc == cudaSuccess) rc = take_event(&w.after);
  if (rc == cudaSuccess) rc = cudaEventRecord(w.before, stream);
  if (rc != cudaSuccess) {
    release();
    return failed(rc);
  }
  Status issued = issue();
  if (issued.ok()) {
    rc = cudaEventRecord(w.after, stream);
    if (rc != cudaSuccess) issued = failed(rc);
  }
  if (!issued.ok()) {  // nothing (or nothing watchable) was queued after `before`
    release();
    return issued;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  watched_.push_back(std::move(w));
  return ok_status();
}

void NcclWatchdog::run() {
  cudaSetDevice(device_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    while (poll_oldest(lock)) {
    }
    wake_.wait_for(lock, kPollInterval, [this] { return stopping_; });
  }
}

bool NcclWatchdog::poll_oldest(std::unique_lock<std::mutex>& lock) {
  if (watched_.empty()) return false;
  Watched& w = watched_.front();
  auto drop = [this] {  // the events back to the free list (re-recorded only once complete)
    free_events_.push_back(watched_.front().before);
    free_events_.push_back(watched_.front().after);
    watched_.pop_front();
  };
  const cudaError_t q = cudaEventQuery(w.after);
  if (q != cudaErrorNotReady) {  // complete, or failed: the stream's synchronisation says so
    if (q != cudaSuccess) (void)cudaGetLastError();
    drop();
    return true;
  }
  (void)cudaGetLastError();  // not ready is no error, but it sits in the last-error slot
  const auto now = std::chrono::steady_clock::now();
  if (!w.started) {
    const cudaError_t b = cudaEventQuery(w.before);
    if (b == cudaErrorNotReady) (void)cudaGetLastError();
    if (b != cudaErrorNotReady) {  // what was ahead of it is done: it is running (or failed)
      w.started = true;
      w.deadline = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(w.timeout_s));
    }
  }
  Status failure;
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
      async != ncclInProgress) {
    failure = make_error(ErrorCode::kComm, describe_call(w.call, w.seq),
                         ": NCCL asynchronous error: ", ncclGetErrorString(async));
  } else if (w.started && now > w.deadline) {
    failure =
        make_error(ErrorCode::kComm, describe_call(w.call, w.seq), " did not complete within ",
                   w.timeout_s, " s on its stream (a peer failed or did not call it)");
  }
  if (failure.ok()) return false;
  lock.unlock();
  on_failure_(failure);  // NcclComm's abort: does not return
  lock.lock();
  // Reported once (an on_failure that returns); its events are not reused (they may never
  // complete): CUDA releases their resources when they do.
  if (!watched_.empty()) {
    cudaEventDestroy(watched_.front().before);
    cudaEventDestroy(watched_.front().after);
    watched_.pop_front();
  }
  return false;
}

}  // namespace strata::comm
