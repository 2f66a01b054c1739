#include "comm/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "comm/mpi_comm_impl.h"
#include "comm/nccl_watchdog.h"
#include "core/log.h"

namespace strata::comm {
namespace {

Status cuda_status(cudaError_t rc, std::string_view what) {
  if (rc == cudaSuccess) return ok_status();
  return make_error(ErrorCode::kCuda, what, ": ", cudaGetErrorString(rc));
}

Status nccl_status(ncclResult_t rc, std::string_view what) {
  if (rc == ncclSuccess) return ok_status();
  const char* last = ncclGetLastError(nullptr);  // NCCL's own words, e.g. which rank or GPU
  const std::string detail =
      last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : std::string();
  return make_error(ErrorCode::kComm, what, ": ", ncclGetErrorString(rc), detail);
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kMax ? ncclMax : ncclSum; }

// A collective enqueued on the stream; done when the event recorded after it has completed.
class NcclOp final : public PendingOp {
 public:
  NcclOp(cudaEvent_t event, ncclComm_t comm) : event_(event), comm_(comm) {}
  ~NcclOp() override { cudaEventDestroy(event_); }
  NcclOp(const NcclOp&) = delete;
  NcclOp& operator=(const NcclOp&) = delete;

  Status poll(bool& done) override {
    const cudaError_t q = cudaEventQuery(event_);
    if (q == cudaSuccess) {
      done = true;
      return ok_status();
    }
    if (q != cudaErrorNotReady) {
      done = true;
      return cuda_status(q, "cudaEventQuery");
    }
    // Not ready is no error, but the runtime keeps it in this thread's last-error slot, where
    // the next kernel launch's cudaGetLastError would report it as its own failure (as
    // CudaEvent::query does).
    (void)cudaGetLastError();
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress) {
      done = true;
      return nccl_status(async, "NCCL asynchronous error");
    }
    done = false;
    return ok_status();
  }

 private:
  cudaEvent_t event_;
  ncclComm_t comm_;
};

class NcclComm final : public Communicator {
 public:
  NcclComm(std::unique_ptr<MpiComm> bootstrap, CommOptions options)
      : Communicator(options), bootstrap_(std::move(bootstrap)) {}

  ~NcclComm() override {
    watchdog_.reset();  // before the communicator it polls
    if (device_ >= 0) cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (comm_ != nullptr) {
      // After an asynchronous error (a failed or dead peer) finalizing could wait forever.
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || state != ncclSuccess) {
        ncclCommAbort(comm_);
      } else {
        ncclCommFinalize(comm_);
        ncclCommDestroy(comm_);
      }
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Per-rank set-up; the caller agrees on the outcome across ranks.
  Status init_device(int device_ordinal) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();
      count = 0;
    }
    if (count == 0) return make_error(ErrorCode::kUnsupported, "no CUDA GPU is visible");
    device_ = device_ordinal >= 0 ? device_ordinal : bootstrap_->local_rank() % count;
    if (device_ >= count) {
      return make_error(ErrorCode::kConfig, "GPU ordinal ", device_, " is not present (", count,
                        " visible)");
    }
    STRATA_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    STRATA_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                                       "cudaStreamCreate"));
    return cuda_status(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc");
  }

  Status init_nccl(const ncclUniqueId& id) {
    return nccl_status(ncclCommInitRank(&comm_, bootstrap_->size(), id, bootstrap_->rank()),
                       "ncclCommInitRank");
  }

  MpiComm& bootstrap() { return *bootstrap_; }
  int device() const { return device_; }

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  int local_rank() const override { return bootstrap_->local_rank(); }
  int local_size() const override { return bootstrap_->local_size(); }
  std::string_view backend() const override { return "nccl"; }
  bool device_buffers() const override { return true; }
  bool stream_ordered() const override { return true; }

  [[noreturn]] void abort(const Status& reason) override {
    std::fprintf(stderr, "strata: rank %d of %d aborting: %s\n", rank(), size(),
                 reason.to_string().c_str());
    std::fflush(stderr);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    MPI_Abort(bootstrap_->handle(), 1);
    std::abort();
  }

 private:
  // The communicator's device current on the calling thread; cudaSetDevice only when another is
  // (it costs a call into the runtime on every collective otherwise).
  Status activate() const {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current == device_) return ok_status();
    return cuda_status(cudaSetDevice(device_), "cudaSetDevice");
  }

 protected:
  Status verify_call(const CollectiveCall& call, bool locally_valid) override {
    return bootstrap_->verify_call(call, locally_valid);
  }

  Result<std::unique_ptr<PendingOp>> start_impl(const CollectiveCall& call) override {
    STRATA_RETURN_IF_ERROR(activate());
    // The completion event exists before anything is queued, so no error return below leaves
    // NCCL working on the caller's buffers unbeknown to the caller.
    cudaEvent_t event = nullptr;
    STRATA_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                                       "cudaEventCreateWithFlags"));
    auto op = std::make_unique<NcclOp>(event, comm_);
    STRATA_RETURN_IF_ERROR(issue(call, stream_));
    STRATA_RETURN_IF_ERROR(cuda_status(cudaEventRecord(event, stream_), "cudaEventRecord"));
    return std::unique_ptr<PendingOp>(std::move(op));
  }

  Status enqueue_impl(const CollectiveCall& call, uint64_t seq, void* stream) override {
    STRATA_RETURN_IF_ERROR(activate());
    auto* s = static_cast<cudaStream_t>(stream);
    const double timeout_s = options().timeout_s;
    if (timeout_s <= 0.0) return issue(call, s);
    {
      std::lock_guard<std::mutex> lock(watchdog_mutex_);
      if (watchdog_ == nullptr) {
        watchdog_ = std::make_unique<NcclWatchdog>(
            comm_, device_, [this](const Status& failure) { abort(failure); });
      }
    }
    return watchdog_->watch(s, call, seq, timeout_s, [&] { return issue(call, s); });
  }

 private:
  // Enqueues the NCCL calls of `call` on `stream`.
  Status issue(const CollectiveCall& call, cudaStream_t stream) {
    const size_t c = call.count;
    const size_t e = dtype_size(call.dtype);
    const ncclDataType_t type = nccl_type(call.dtype);
    const int me = rank();
    const int n = size();
    ncclResult_t rc = ncclSuccess;
    const char* what = "";
    switch (call.kind) {
      case CollectiveKind::kAllReduce:
        what = "ncclAllReduce";
        rc = ncclAllReduce(call.send, call.recv, c, type, nccl_op(call.op), comm_, stream);
        break;
      case CollectiveKind::kReduce:
        what = "ncclReduce";
        rc = ncclReduce(call.send, call.recv, c, type, nccl_op(call.op), call.root, comm_, stream);
        break;
      case CollectiveKind::kBroadcast:
        what = "ncclBroadcast";
        rc = ncclBroadcast(call.recv, call.recv, c, type, call.root, comm_, stream);
        break;
      case CollectiveKind::kReduceScatter:
        what = "ncclReduceScatter";
        rc = ncclReduceScatter(call.send, call.recv, c, type, nccl_op(call.op), comm_, stream);
        break;
      case CollectiveKind::kAllGather:
        what = "ncclAllGather";
        rc = ncclAllGather(call.send, call.recv, c, type, comm_, stream);
        break;
      case CollectiveKind::kGather:
      case CollectiveKind::kScatter: {
        const bool gather = call.kind == CollectiveKind::kGather;
        what = gather ? "ncclSend/ncclRecv (gather)" : "ncclSend/ncclRecv (scatter)";
        rc = ncclGroupStart();
        for (int r = 0; r < n && rc == ncclSuccess; ++r) {
          if (me == call.root) {
            if (r == me) {
              const void* src = gather ? call.send
                                       : static_cast<const std::byte*>(call.send) +
                                             static_cast<size_t>(r) * c * e;
              void* dst = gather
                              ? static_cast<std::byte*>(call.recv) + static_cast<size_t>(r) * c * e
                              : call.recv;
              if (src != dst && c > 0) {
                const cudaError_t ce =
                    cudaMemcpyAsync(dst, src, c * e, cudaMemcpyDeviceToDevice, stream);
                if (ce != cudaSuccess) {
                  ncclGroupEnd();
                  return cuda_status(ce, "cudaMemcpyAsync");
                }
              }
            } else if (gather) {
              rc = ncclRecv(static_cast<std::byte*>(call.recv) + static_cast<size_t>(r) * c * e, c,
                            type, r, comm_, stream);
            } else {
              rc = ncclSend(
                  static_cast<const std::byte*>(call.send) + static_cast<size_t>(r) * c * e, c,
                  type, r, comm_, stream);
            }
          } else if (r == call.root) {
            rc = gather ? ncclSend(call.send, c, type, r, comm_, stream)
                        : ncclRecv(call.recv, c, type, r, comm_, stream);
          }
        }
        const ncclResult_t end = ncclGroupEnd();
        if (rc == ncclSuccess) rc = end;
        break;
      }
      case CollectiveKind::kBarrier:
        what = "ncclAllReduce (barrier)";
        rc = ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream);
        break;
    }
    return nccl_status(rc, what);
  }

  std::unique_ptr<MpiComm> bootstrap_;
  std::mutex watchdog_mutex_;
  std::unique_ptr<NcclWatchdog> watchdog_;  // the enqueued collectives' timeout (made at the first)
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* scratch_ = nullptr;
  int device_ = -1;
};

// Every rank contributes its status; all learn whether any rank failed (and rank 0's id).
Status agree(MpiComm& mpi, const Status& local, std::string_view stage) {
  int bad = local.ok() ? 0 : 1;
  int any_bad = 0;
  STRATA_RETURN_IF_ERROR(mpi_status(
      MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, mpi.handle()), "MPI_Allreduce"));
  if (!local.ok()) return local;
  if (any_bad != 0) {
    return make_error(ErrorCode::kComm, "NCCL start-up (", stage,
                      ") failed on another rank (see its message)");
  }
  return ok_status();
}

}  // namespace

int nccl_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or GPU: not an error for later calls to see
    return 0;
  }
  return count;
}

Result<std::unique_ptr<Communicator>> create_nccl_comm(CommOptions options, int device_ordinal) {
  STRATA_ASSIGN_OR_RETURN(auto mpi, create_mpi_comm_impl(options));
  auto comm = std::make_unique<NcclComm>(std::move(mpi), options);
  MpiComm& boot = comm->bootstrap();
  STRATA_RETURN_IF_ERROR(agree(boot, comm->init_device(device_ordinal), "device"));

  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  Status id_status = ok_status();
  if (boot.rank() == 0) id_status = nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId");
  STRATA_RETURN_IF_ERROR(agree(boot, id_status, "unique id"));
  STRATA_RETURN_IF_ERROR(mpi_status(
      MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, boot.handle()), "MPI_Bcast"));
  STRATA_RETURN_IF_ERROR(agree(boot, comm->init_nccl(id), "ncclCommInitRank"));
  STRATA_LOG(kInfo, "nccl communicator: rank " << comm->rank() << " of " << comm->size()
                                               << " on GPU " << comm->device());
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace strata::comm
