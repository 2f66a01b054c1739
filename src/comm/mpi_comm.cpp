#include "comm/mpi_comm.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "comm/mpi_comm_impl.h"
#include "core/log.h"

namespace strata::comm {

Status mpi_status(int rc, std::string_view what) {
  if (rc == MPI_SUCCESS) return ok_status();
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) {
    std::snprintf(text, sizeof(text), "MPI error %d", rc);
  }
  return make_error(ErrorCode::kComm, what, ": ", text);
}

namespace {

// Finalises MPI at process exit when this library initialised it. Function-local static, so it is
// destroyed after every communicator created after it (and MpiComm frees nothing once finalised).
struct MpiLifetime {
  bool initialised_here = false;
  ~MpiLifetime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (initialised_here && !finalized) MPI_Finalize();
  }
};

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

MPI_Datatype mpi_type(DType t) { return t == DType::kF32 ? MPI_FLOAT : MPI_UINT16_T; }
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM; }

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

// One started MPI collective with the scratch it owns.
class MpiOp final : public PendingOp {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  ScratchPool::Buffer send32;     // widened 16-bit input
  ScratchPool::Buffer recv32;     // fp32 result, narrowed into `out` on completion
  std::vector<std::byte> staged;  // result staged because it overlaps the input
  void* out = nullptr;            // where the result goes on completion (null: nowhere)
  size_t out_count = 0;
  DType dtype = DType::kF32;

  Status poll(bool& done) override {
    int flag = 0;
    const int rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      done = true;
      return mpi_status(rc, "MPI_Test");
    }
    done = flag != 0;
    if (done && out != nullptr) {
      if (!recv32.empty()) {
        convert(recv32.data(), DType::kF32, out, dtype, out_count);
      } else if (!staged.empty()) {
        std::memcpy(out, staged.data(), staged.size());
      }
    }
    return ok_status();
  }
};

}  // namespace

Status ensure_mpi_initialized() {
  static MpiLifetime lifetime;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return make_error(ErrorCode::kComm, "MPI was already finalised");
  int initialised = 0;
  MPI_Initialized(&initialised);
  int provided = 0;
  if (!initialised) {
    STRATA_RETURN_IF_ERROR(mpi_status(
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread"));
    lifetime.initialised_here = true;
  } else {
    MPI_Query_thread(&provided);
  }
  static bool warned = false;
  if (provided < MPI_THREAD_MULTIPLE && !warned) {
    warned = true;
    STRATA_LOG(kWarn, "MPI provides " << thread_level_name(provided)
                                      << " (not MPI_THREAD_MULTIPLE): use MPI from one thread");
  }
  return ok_status();
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

MpiComm::MpiComm(MPI_Comm comm, CommOptions options) : Communicator(options), comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm local = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local) ==
      MPI_SUCCESS) {
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
  }
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiComm::abort(const Status& reason) {
  std::fprintf(stderr, "strata: rank %d of %d aborting: %s\n", rank_, size_,
               reason.to_string().c_str());
  std::fflush(stderr);
  MPI_Abort(comm_, 1);
  std::abort();  // MPI_Abort does not return; if it did, still end this process.
}

Status MpiComm::verify_call(const CollectiveCall& call, bool locally_valid) {
  const bool reduce_family = call.kind == CollectiveKind::kReduce ||
                             call.kind == CollectiveKind::kReduceScatter ||
                             call.kind == CollectiveKind::kAllReduce;
  const bool rooted =
      call.kind == CollectiveKind::kReduce || call.kind == CollectiveKind::kGather ||
      call.kind == CollectiveKind::kBroadcast || call.kind == CollectiveKind::kScatter;
  constexpr int kFields = 6;
  static constexpr const char* kNames[kFields] = {
      "invalid arguments", "collective", "count", "dtype", "reduce op", "root"};
  const int64_t fields[kFields] = {
      locally_valid ? 0 : 1,
      static_cast<int64_t>(call.kind),
      static_cast<int64_t>(call.count),
      call.kind == CollectiveKind::kBarrier ? -1 : static_cast<int64_t>(call.dtype),
      reduce_family ? static_cast<int64_t>(call.op) : -1,
      rooted ? call.root : -1};
  int64_t local[2 * kFields];
  int64_t global[2 * kFields];
  for (int i = 0; i < kFields; ++i) {
    local[i] = fields[i];
    local[kFields + i] = -fields[i];
  }
  MPI_Request req = MPI_REQUEST_NULL;
  STRATA_RETURN_IF_ERROR(
      mpi_status(MPI_Iallreduce(local, global, 2 * kFields, MPI_INT64_T, MPI_MAX, comm_, &req),
                 "MPI_Iallreduce (call check)"));
  const auto start = std::chrono::steady_clock::now();
  Backoff backoff;
  for (;;) {
    int flag = 0;
    STRATA_RETURN_IF_ERROR(mpi_status(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test"));
    if (flag) break;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options().timeout_s > 0 && waited > options().timeout_s) {
      abort(make_error(ErrorCode::kComm, "the call check of ", collective_name(call.kind),
                       " did not complete within ", options().timeout_s, " s on rank ", rank_));
    }
    backoff.pause();
  }
  if (global[0] != 0) {
    return make_error(ErrorCode::kComm, "a rank passed invalid arguments (see its own error)");
  }
  for (int i = 1; i < kFields; ++i) {
    const int64_t hi = global[i];
    const int64_t lo = -global[kFields + i];
    if (hi != lo) {
      if (i == 1) {
        return make_error(ErrorCode::kComm, "ranks called different collectives (",
                          collective_name(static_cast<CollectiveKind>(lo)), " .. ",
                          collective_name(static_cast<CollectiveKind>(hi)), ")");
      }
      return make_error(ErrorCode::kComm, "ranks disagree on the ", kNames[i], ": min ", lo,
                        ", max ", hi, " (this rank: ", fields[i], ")");
    }
  }
  return ok_status();
}

Result<std::unique_ptr<PendingOp>> MpiComm::start_impl(const CollectiveCall& call) {
  const size_t n = static_cast<size_t>(size_);
  const size_t c = call.count;
  const size_t e = dtype_size(call.dtype);
  const bool wide = call.dtype != DType::kF32;  // 16-bit: reductions go through fp32
  const bool full_is_n_c =
      call.kind == CollectiveKind::kReduceScatter || call.kind == CollectiveKind::kAllGather ||
      call.kind == CollectiveKind::kGather || call.kind == CollectiveKind::kScatter;
  if ((full_is_n_c ? c * n : c) > static_cast<size_t>(INT_MAX)) {
    return make_error(ErrorCode::kUnsupported, "count ", c, " exceeds MPI's int limit of ", INT_MAX,
                      " elements per call; split the call");
  }
  const int ic = static_cast<int>(c);
  const MPI_Datatype type = mpi_type(call.dtype);
  auto op = std::make_unique<MpiOp>();
  op->dtype = call.dtype;
  MPI_Request* req = &op->request;
  const bool root = rank_ == call.root;
  int rc = MPI_SUCCESS;
  const char* what = "";

  switch (call.kind) {
    case CollectiveKind::kAllReduce:
      what = "MPI_Iallreduce";
      if (wide) {
        op->send32 = scratch_->take(c);
        op->recv32 = scratch_->take(c);
        convert(call.send, call.dtype, op->send32.data(), DType::kF32, c);
        op->out = call.recv;
        op->out_count = c;
        rc = MPI_Iallreduce(op->send32.data(), op->recv32.data(), ic, MPI_FLOAT, mpi_op(call.op),
                            comm_, req);
      } else if (call.send == call.recv) {
        rc = MPI_Iallreduce(MPI_IN_PLACE, call.recv, ic, type, mpi_op(call.op), comm_, req);
      } else {
        rc = MPI_Iallreduce(call.send, call.recv, ic, type, mpi_op(call.op), comm_, req);
      }
      break;
    case CollectiveKind::kReduce:
      what = "MPI_Ireduce";
      if (wide) {
        op->send32 = scratch_->take(c);
        convert(call.send, call.dtype, op->send32.data(), DType::kF32, c);
        if (root) {
          op->recv32 = scratch_->take(c);
          op->out = call.recv;
          op->out_count = c;
        }
        rc = MPI_Ireduce(op->send32.data(), root ? op->recv32.data() : nullptr, ic, MPI_FLOAT,
                         mpi_op(call.op), call.root, comm_, req);
      } else if (root && call.send == call.recv) {
        rc = MPI_Ireduce(MPI_IN_PLACE, call.recv, ic, type, mpi_op(call.op), call.root, comm_, req);
      } else {
        rc = MPI_Ireduce(call.send, root ? call.recv : nullptr, ic, type, mpi_op(call.op),
                         call.root, comm_, req);
      }
      break;
    case CollectiveKind::kBroadcast:
      what = "MPI_Ibcast";
      rc = MPI_Ibcast(call.recv, ic, type, call.root, comm_, req);
      break;
    case CollectiveKind::kReduceScatter:
      what = "MPI_Ireduce_scatter_block";
      if (wide) {
        op->send32 = scratch_->take(n * c);
        op->recv32 = scratch_->take(c);
        convert(call.send, call.dtype, op->send32.data(), DType::kF32, n * c);
        op->out = call.recv;
        op->out_count = c;
        rc = MPI_Ireduce_scatter_block(op->send32.data(), op->recv32.data(), ic, MPI_FLOAT,
                                       mpi_op(call.op), comm_, req);
      } else if (overlaps(call.send, n * c * e, call.recv, c * e)) {
        op->staged.resize(c * e);
        op->out = call.recv;
        rc = MPI_Ireduce_scatter_block(call.send, op->staged.data(), ic, type, mpi_op(call.op),
                                       comm_, req);
      } else {
        rc = MPI_Ireduce_scatter_block(call.send, call.recv, ic, type, mpi_op(call.op), comm_, req);
      }
      break;
    case CollectiveKind::kAllGather: {
      what = "MPI_Iallgather";
      const void* in_place_slot = static_cast<const std::byte*>(call.recv) + rank_ * c * e;
      if (call.send == in_place_slot) {
        rc = MPI_Iallgather(MPI_IN_PLACE, 0, type, call.recv, ic, type, comm_, req);
      } else if (overlaps(call.send, c * e, call.recv, n * c * e)) {
        // Copy the input aside so MPI may write the whole output.
        op->staged.resize(c * e);
        std::memcpy(op->staged.data(), call.send, c * e);
        // op->out stays null: nothing is copied back; `staged` lives until completion.
        rc = MPI_Iallgather(op->staged.data(), ic, type, call.recv, ic, type, comm_, req);
      } else {
        rc = MPI_Iallgather(call.send, ic, type, call.recv, ic, type, comm_, req);
      }
      break;
    }
    case CollectiveKind::kGather: {
      what = "MPI_Igather";
      const void* root_slot =
          root ? static_cast<const std::byte*>(call.recv) + call.root * c * e : nullptr;
      if (root && call.send == root_slot) {
        rc = MPI_Igather(MPI_IN_PLACE, 0, type, call.recv, ic, type, call.root, comm_, req);
      } else {
        rc = MPI_Igather(call.send, ic, type, root ? call.recv : nullptr, ic, type, call.root,
                         comm_, req);
      }
      break;
    }
    case CollectiveKind::kScatter: {
      what = "MPI_Iscatter";
      const void* root_slot =
          root ? static_cast<const std::byte*>(call.send) + call.root * c * e : nullptr;
      if (root && call.recv == root_slot) {
        rc = MPI_Iscatter(call.send, ic, type, MPI_IN_PLACE, 0, type, call.root, comm_, req);
      } else {
        rc = MPI_Iscatter(root ? call.send : nullptr, ic, type, call.recv, ic, type, call.root,
                          comm_, req);
      }
      break;
    }
    case CollectiveKind::kBarrier:
      what = "MPI_Ibarrier";
      rc = MPI_Ibarrier(comm_, req);
      break;
  }
  STRATA_RETURN_IF_ERROR(mpi_status(rc, what));
  return std::unique_ptr<PendingOp>(std::move(op));
}

Result<std::unique_ptr<MpiComm>> create_mpi_comm_impl(CommOptions options) {
  STRATA_RETURN_IF_ERROR(ensure_mpi_initialized());
  MPI_Comm dup = MPI_COMM_NULL;
  STRATA_RETURN_IF_ERROR(mpi_status(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup"));
  auto comm = std::make_unique<MpiComm>(dup, options);  // owns `dup` from here
  STRATA_RETURN_IF_ERROR(
      mpi_status(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  return comm;
}

Result<std::unique_ptr<Communicator>> create_mpi_comm(CommOptions options) {
  STRATA_ASSIGN_OR_RETURN(auto comm, create_mpi_comm_impl(options));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace strata::comm
