#include "comm/nccl_watchdog.h"

#include <utility>

namespace strata::comm {
namespace {
// How often the thread looks at the oldest collective: small against any timeout, and a query a
// poll costs next to nothing.
constexpr auto kPollInterval = std::chrono::milliseconds(20);
}  // namespace

NcclWatchdog::NcclWatchdog(ncclComm_t comm, int device, double timeout_s,
                           std::function<void(const Status&)> on_failure)
    : comm_(comm), device_(device), timeout_s_(timeout_s), on_failure_(std::move(on_failure)) {
  thread_ = std::thread([this] { run(); });
}

NcclWatchdog::~NcclWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (Watched& w : watched_) cudaEventDestroy(w.event);
}

Status NcclWatchdog::watch(cudaStream_t stream, std::string what) {
  cudaEvent_t event = nullptr;
  cudaError_t rc = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (rc == cudaSuccess) rc = cudaEventRecord(event, stream);
  if (rc != cudaSuccess) {
    if (event != nullptr) cudaEventDestroy(event);
    return make_error(ErrorCode::kCuda, "watching ", what, ": ", cudaGetErrorString(rc));
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s_));
  std::lock_guard<std::mutex> lock(mutex_);
  watched_.push_back(Watched{event, std::move(what), deadline});
  return ok_status();
}

size_t NcclWatchdog::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return watched_.size();
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
  const cudaError_t q = cudaEventQuery(w.event);
  if (q != cudaErrorNotReady) {  // complete, or failed: the stream's synchronisation says so
    if (q != cudaSuccess) (void)cudaGetLastError();
    cudaEventDestroy(w.event);
    watched_.pop_front();
    return true;
  }
  (void)cudaGetLastError();  // not ready is no error, but it sits in the last-error slot
  Status failure;
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
      async != ncclInProgress) {
    failure = make_error(ErrorCode::kComm, w.what,
                         ": NCCL asynchronous error: ", ncclGetErrorString(async));
  } else if (std::chrono::steady_clock::now() > w.deadline) {
    failure = make_error(ErrorCode::kComm, w.what, " did not complete within ", timeout_s_,
                         " s on its stream (a peer failed or did not call it)");
  }
  if (failure.ok()) return false;
  lock.unlock();
  on_failure_(failure);  // NcclComm's abort: does not return
  lock.lock();
  // Reported once (a caller's on_failure that returns): the event is released when it completes.
  if (!watched_.empty()) {
    cudaEventDestroy(watched_.front().event);
    watched_.pop_front();
  }
  return false;
}

}  // namespace strata::comm
