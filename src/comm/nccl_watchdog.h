// NcclWatchdog: the timeout of the collectives NcclComm enqueues on its callers' streams
// (Communicator::enqueue, the executor's link lane). No host thread waits on those, so a dead or
// stalled peer would hold the stream, and the step's synchronisation, forever. The watchdog
// records a CUDA event before and after each (from a free list: events are made once, not per
// collective), in enqueue order, and a thread of its own polls the
// oldest: complete, it is dropped; its clock starts when the event before it completes (the work
// ahead of it on the stream done: the executor enqueues a collective long before it can run, and
// a host wait's clock starts when the collective is started); past that plus the timeout, or
// with an asynchronous NCCL error on the communicator, `on_failure` is called with a message
// naming the collective (describe_call, built only then; NcclComm aborts the job, as
// CommHandle::wait does past the same timeout). An event whose query fails otherwise (a device
// fault) is dropped: the stream's synchronisation reports that.
//
// Ownership: owns the events and the thread; borrows the NCCL communicator (which must outlive
// it). Thread safety: watch() from any thread; the destructor stops the thread (no call of
// on_failure after it returns).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace strata::comm {

class NcclWatchdog {
 public:
  // `device`: the communicator's CUDA device (the thread's current device).
  NcclWatchdog(ncclComm_t comm, int device, std::function<void(const Status&)> on_failure);
  ~NcclWatchdog();
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // Enqueues the collective `call` (the communicator's `seq`-th) on `stream` (`issue`) between
  // two events and watches it, with `timeout_s` (> 0) from when the first completes.
  Status watch(cudaStream_t stream, const CollectiveCall& call, uint64_t seq, double timeout_s,
               const std::function<Status()>& issue);

 private:
  struct Watched {
    cudaEvent_t before = nullptr, after = nullptr;
    CollectiveCall call;
    uint64_t seq = 0;
    double timeout_s = 0.0;
    bool started = false;  // `before` seen complete; the deadline runs
    std::chrono::steady_clock::time_point deadline;
  };
  void run();
  // An event from the free list, or a new one; back to the list.
  cudaError_t take_event(cudaEvent_t* event);
  void give_back(cudaEvent_t event);
  // One poll of the oldest event; false when the list is empty or the oldest is not complete.
  bool poll_oldest(std::unique_lock<std::mutex>& lock);

  ncclComm_t comm_;
  int device_;
  std::function<void(const Status&)> on_failure_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Watched> watched_;
  std::vector<cudaEvent_t> free_events_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace strata::comm
