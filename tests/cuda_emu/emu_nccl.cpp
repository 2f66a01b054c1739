// The emulated NCCL (cuda_emu.h, include/nccl.h): communicators over MPI between the ranks'
// processes (an MPI_Comm_split of MPI_COMM_WORLD by the unique id), one rank without MPI.
// Collectives are checked when called (device memory of the communicator's device, in-place
// forms, peers) and run in stream order on the stream's worker: the contributions are exchanged
// with MPI and reduced in rank order in fp32, 16-bit results rounded once (NCCL's order is its
// own; for two ranks every order gives these bits). Operations between ncclGroupStart and
// ncclGroupEnd run as one unit, so grouped sends and receives cannot deadlock. An MPI failure
// is the communicator's asynchronous error (ncclCommGetAsyncError).
// Needs MPI_THREAD_MULTIPLE (strata's MpiComm asks for it): MPI runs on the streams' workers.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "emu_internal.h"
#include "include/nccl.h"

struct ncclComm {
  int rank = 0;
  int nranks = 1;
  int device = 0;
  MPI_Comm mpi = MPI_COMM_NULL;
  std::mutex run_mu;  // one operation of the communicator at a time
  std::atomic<int> async_error{ncclSuccess};
  std::string last_error;
  bool aborted = false;
};

namespace {

thread_local std::string last_error;
thread_local int group_depth = 0;

ncclResult_t refuse(ncclResult_t rc, const std::string& why) {
  last_error = why;
  return rc;
}

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
  }
}

enum class Kind { kAllReduce, kReduce, kBroadcast, kReduceScatter, kAllGather, kSend, kRecv };

struct Op {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;  // elements per rank's part
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;  // root, or peer for send/recv
  ncclComm_t comm;
  cudaStream_t stream;
};

thread_local std::vector<Op> group_ops;

float load(const void* p, ncclDataType_t t, size_t i) {
  switch (t) {
    case ncclFloat16: return strata::load_as_f32(p, strata::DType::kF16, i);
    case ncclBfloat16: return strata::load_as_f32(p, strata::DType::kBF16, i);
    default: return static_cast<const float*>(p)[i];
  }
}
void store(void* p, ncclDataType_t t, size_t i, float v) {
  switch (t) {
    case ncclFloat16: strata::store_from_f32(p, strata::DType::kF16, i, v); break;
    case ncclBfloat16: strata::store_from_f32(p, strata::DType::kBF16, i, v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

// out[i] = reduction over ranks r = 0..n-1 of parts[r][i], in rank order, in fp32.
void reduce_parts(const std::vector<char>& parts, int n, size_t count, ncclDataType_t t,
                  ncclRedOp_t op, void* out) {
  const size_t part_bytes = count * type_bytes(t);
  for (size_t i = 0; i < count; ++i) {
    float acc = load(parts.data(), t, i);
    for (int r = 1; r < n; ++r) {
      const float v = load(parts.data() + static_cast<size_t>(r) * part_bytes, t, i);
      acc = op == ncclMax ? std::max(acc, v) : acc + v;
    }
    store(out, t, i, acc);
  }
}

// Runs one operation (on the stream's worker); MPI errors become the async error.
int run(const Op& o, std::vector<MPI_Request>& requests) {
  ncclComm& c = *o.comm;
  const size_t part = o.count * type_bytes(o.type);
  const int n = c.nranks;
  const int ib = static_cast<int>(part);
  std::vector<char> parts;
  int rc = MPI_SUCCESS;
  // Every rank's contribution in `parts` (rank order) through `exchange`, or this rank's alone.
  const auto collect = [&](auto exchange) {
    parts.resize(part * static_cast<size_t>(n));
    if (n == 1) {
      std::memcpy(parts.data(), o.send, part);
      return MPI_SUCCESS;
    }
    return exchange();
  };
  switch (o.kind) {
    case Kind::kAllReduce:
      rc = collect(
          [&] { return MPI_Allgather(o.send, ib, MPI_BYTE, parts.data(), ib, MPI_BYTE, c.mpi); });
      if (rc == MPI_SUCCESS) reduce_parts(parts, n, o.count, o.type, o.op, o.recv);
      break;
    case Kind::kReduce:
      rc = collect([&] {
        return MPI_Gather(o.send, ib, MPI_BYTE, parts.data(), ib, MPI_BYTE, o.root, c.mpi);
      });
      if (rc == MPI_SUCCESS && c.rank == o.root) {
        reduce_parts(parts, n, o.count, o.type, o.op, o.recv);
      }
      break;
    case Kind::kBroadcast:
      if (c.rank == o.root && o.send != o.recv) std::memcpy(o.recv, o.send, part);
      if (n > 1) rc = MPI_Bcast(o.recv, ib, MPI_BYTE, o.root, c.mpi);
      break;
    case Kind::kReduceScatter:
      rc = collect(
          [&] { return MPI_Alltoall(o.send, ib, MPI_BYTE, parts.data(), ib, MPI_BYTE, c.mpi); });
      if (rc == MPI_SUCCESS) reduce_parts(parts, n, o.count, o.type, o.op, o.recv);
      break;
    case Kind::kAllGather:
      if (n == 1) {
        if (o.send != o.recv) std::memcpy(o.recv, o.send, part);
      } else {
        parts.assign(static_cast<const char*>(o.send), static_cast<const char*>(o.send) + part);
        rc = MPI_Allgather(parts.data(), ib, MPI_BYTE, o.recv, ib, MPI_BYTE, c.mpi);
      }
      break;
    case Kind::kSend:
      requests.emplace_back();
      rc = MPI_Isend(o.send, ib, MPI_BYTE, o.root, 0, c.mpi, &requests.back());
      break;
    case Kind::kRecv:
      requests.emplace_back();
      rc = MPI_Irecv(o.recv, ib, MPI_BYTE, o.root, 0, c.mpi, &requests.back());
      break;
  }
  cuda_emu::detail::counters().collectives++;
  return rc;
}

// Enqueues a unit of operations (one call, or a group) on its stream.
ncclResult_t submit(std::vector<Op> ops) {
  if (ops.empty()) return ncclSuccess;
  const cudaStream_t stream = ops.front().stream;
  for (const Op& o : ops) {
    if (o.stream != stream || o.comm != ops.front().comm) {
      return refuse(ncclInvalidUsage,
                    "a group over several streams or communicators (the "
                    "emulation runs one stream and communicator a group)");
    }
  }
  const cudaError_t err = cuda_emu::detail::enqueue(
      stream,
      [ops] {
        ncclComm& c = *ops.front().comm;
        if (c.async_error != ncclSuccess) return;
        std::lock_guard lock(c.run_mu);
        std::vector<MPI_Request> requests;
        int rc = MPI_SUCCESS;
        for (const Op& o : ops) {
          rc = run(o, requests);
          if (rc != MPI_SUCCESS) break;
        }
        if (rc == MPI_SUCCESS && !requests.empty()) {
          rc = MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
        }
        if (rc != MPI_SUCCESS) {
          char text[MPI_MAX_ERROR_STRING];
          int len = 0;
          MPI_Error_string(rc, text, &len);
          c.last_error = std::string("MPI: ") + std::string(text, static_cast<size_t>(len));
          c.async_error = ncclRemoteError;
        }
      },
      "NCCL operation");
  return err == cudaSuccess ? ncclSuccess
                            : refuse(ncclUnhandledCudaError, "the stream refused the operation");
}

// Checks and submits (or, inside a group, keeps) one operation. `send_bytes`/`recv_bytes`: the
// extents the operation touches.
ncclResult_t call(const Op& o, const char* api, size_t send_bytes, size_t recv_bytes) {
  if (cuda_emu::detail::enter(api) != cudaSuccess) {
    return refuse(ncclInvalidUsage, std::string(api) + " from a host function");
  }
  if (o.comm == nullptr || o.comm->aborted) {
    return refuse(ncclInvalidArgument, std::string(api) + ": no communicator");
  }
  if (o.type != ncclFloat32 && o.type != ncclFloat16 && o.type != ncclBfloat16 &&
      o.kind != Kind::kBroadcast && o.kind != Kind::kAllGather && o.kind != Kind::kSend &&
      o.kind != Kind::kRecv) {
    return refuse(ncclInvalidArgument, std::string(api) + ": the emulation reduces f32, f16, bf16");
  }
  if (o.op != ncclSum && o.op != ncclMax) {
    return refuse(ncclInvalidArgument, std::string(api) + ": the emulation reduces sum and max");
  }
  const bool rooted = o.kind == Kind::kReduce || o.kind == Kind::kBroadcast ||
                      o.kind == Kind::kSend || o.kind == Kind::kRecv;
  if (rooted && (o.root < 0 || o.root >= o.comm->nranks)) {
    return refuse(ncclInvalidArgument, std::string(api) + ": rank " + std::to_string(o.root) +
                                           " of " + std::to_string(o.comm->nranks));
  }
  if (cuda_emu::detail::stream_device(o.stream) != o.comm->device) {
    return refuse(ncclInvalidArgument,
                  std::string(api) + ": the stream is not on the communicator's device");
  }
  const auto check = [&](const void* p, size_t bytes, const char* what) -> bool {
    return bytes == 0 || cuda_emu::detail::device_of(p, bytes) == o.comm->device ||
           (refuse(ncclInvalidArgument, std::string(api) + ": the " + what + " buffer is not " +
                                            std::to_string(bytes) +
                                            " bytes of device memory of the communicator's "
                                            "device"),
            false);
  };
  if (!check(o.send, send_bytes, "send") || !check(o.recv, recv_bytes, "receive")) {
    return ncclInvalidArgument;
  }
  if (group_depth > 0) {
    group_ops.push_back(o);
    return ncclSuccess;
  }
  return submit({o});
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return refuse(ncclInvalidArgument, "ncclGetUniqueId: null id");
  std::memset(id, 0, sizeof(*id));
  std::random_device rd;
  const uint32_t token = rd() & 0x3fffffffu;
  std::memcpy(id->internal, "strata-emu", 10);
  std::memcpy(id->internal + 16, &token, sizeof(token));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (cuda_emu::detail::enter("ncclCommInitRank") != cudaSuccess || comm == nullptr) {
    return refuse(ncclInvalidArgument, "ncclCommInitRank: bad call");
  }
  if (nranks < 1 || rank < 0 || rank >= nranks || std::memcmp(id.internal, "strata-emu", 10) != 0) {
    return refuse(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                           std::to_string(nranks) + " or the unique id");
  }
  auto c = std::make_unique<ncclComm>();
  c->rank = rank;
  c->nranks = nranks;
  c->device = cuda_emu::detail::current_device();
  if (nranks > 1) {
    int initialised = 0, provided = 0;
    MPI_Initialized(&initialised);
    if (initialised != 0) MPI_Query_thread(&provided);
    if (initialised == 0 || provided < MPI_THREAD_MULTIPLE) {
      return refuse(ncclSystemError,
                    "ncclCommInitRank: the emulation needs MPI initialised with "
                    "MPI_THREAD_MULTIPLE");
    }
    uint32_t token = 0;
    std::memcpy(&token, id.internal + 16, sizeof(token));
    if (MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(token), rank, &c->mpi) != MPI_SUCCESS) {
      return refuse(ncclSystemError, "ncclCommInitRank: MPI_Comm_split failed");
    }
    int size = 0, me = 0;
    MPI_Comm_size(c->mpi, &size);
    MPI_Comm_rank(c->mpi, &me);
    if (size != nranks || me != rank) {
      MPI_Comm_free(&c->mpi);
      return refuse(ncclInvalidUsage, "ncclCommInitRank: " + std::to_string(size) +
                                          " processes share the id, " + std::to_string(nranks) +
                                          " ranks were named");
    }
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
  }
  *comm = c.release();
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return refuse(ncclInvalidArgument, "ncclCommFinalize: null");
  return ncclSuccess;  // operations complete in stream order; nothing else is outstanding
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return refuse(ncclInvalidArgument, "ncclCommDestroy: null");
  if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->aborted = true;  // the MPI communicator is left to the job's end: peers may be gone
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) {
    return refuse(ncclInvalidArgument, "ncclCommGetAsyncError: null");
  }
  *async_error = static_cast<ncclResult_t>(comm->async_error.load());
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t comm) {
  if (comm != nullptr && !comm->last_error.empty()) return comm->last_error.c_str();
  return last_error.c_str();
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * type_bytes(type);
  return call(Op{Kind::kAllReduce, send, recv, count, type, op, 0, comm, stream}, "ncclAllReduce",
              bytes, bytes);
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * type_bytes(type);
  const bool is_root = comm != nullptr && comm->rank == root;
  return call(Op{Kind::kReduce, send, recv, count, type, op, root, comm, stream}, "ncclReduce",
              bytes, is_root ? bytes : 0);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * type_bytes(type);
  const bool is_root = comm != nullptr && comm->rank == root;
  return call(Op{Kind::kBroadcast, send, recv, count, type, ncclSum, root, comm, stream},
              "ncclBroadcast", is_root ? bytes : 0, bytes);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = recv_count * type_bytes(type);
  const int n = comm != nullptr ? comm->nranks : 1;
  if (comm != nullptr && recv != send &&
      static_cast<const char*>(send) < static_cast<char*>(recv) + bytes &&
      static_cast<char*>(recv) < static_cast<const char*>(send) + bytes * n &&
      recv != static_cast<const char*>(send) + bytes * static_cast<size_t>(comm->rank)) {
    return refuse(ncclInvalidArgument,
                  "ncclReduceScatter: the buffers overlap other than in "
                  "place (recv = send + rank * count)");
  }
  return call(Op{Kind::kReduceScatter, send, recv, recv_count, type, op, 0, comm, stream},
              "ncclReduceScatter", bytes * static_cast<size_t>(n), bytes);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = send_count * type_bytes(type);
  const int n = comm != nullptr ? comm->nranks : 1;
  if (comm != nullptr && send != static_cast<char*>(recv) + bytes * size_t(comm->rank) &&
      static_cast<const char*>(send) < static_cast<char*>(recv) + bytes * n &&
      static_cast<char*>(recv) < static_cast<const char*>(send) + bytes) {
    return refuse(ncclInvalidArgument,
                  "ncclAllGather: the buffers overlap other than in place "
                  "(send = recv + rank * count)");
  }
  return call(Op{Kind::kAllGather, send, recv, send_count, type, ncclSum, 0, comm, stream},
              "ncclAllGather", bytes, bytes * static_cast<size_t>(n));
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return call(Op{Kind::kSend, send, nullptr, count, type, ncclSum, peer, comm, stream}, "ncclSend",
              count * type_bytes(type), 0);
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return call(Op{Kind::kRecv, nullptr, recv, count, type, ncclSum, peer, comm, stream}, "ncclRecv",
              0, count * type_bytes(type));
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  std::vector<Op> ops = std::move(group_ops);
  group_ops.clear();
  return submit(std::move(ops));
}
