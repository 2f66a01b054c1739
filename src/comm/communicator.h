// The Communicator (DESIGN.md §2, §5): rank, size and the seven collectives (reduce, gather,
// broadcast, scatter, reduce-scatter, all-gather, all-reduce) plus barrier, each asynchronous
// (a CommHandle with test()/wait()) and synchronous. Backends: LocalComm (one rank), MpiComm (host
// buffers, OpenMPI) and NcclComm (device buffers, NCCL bootstrapped through MPI).
//
// Buffers. Every collective takes void* buffers, an element count and a DType (f32, f16, bf16).
// Reduce-family collectives (reduce, reduce-scatter, all-reduce) take a ReduceOp (kSum, kMax);
// the other collectives ignore it. With n = size() and c = count:
//   all_reduce(send, recv, c)         send: c elements; recv: c elements. send == recv: in place.
//   reduce(send, recv, c, root)       send: c; recv: c on root (unused elsewhere, may be null).
//   broadcast(buf, c, root)           buf: c elements on every rank (in place; root's is the
//   source). reduce_scatter(send, recv, c)     send: n*c; recv: c. recv gets block [rank*c, rank*c
//   + c)
//                                     of the reduction. recv == send + rank*c is allowed.
//   all_gather(send, recv, c)         send: c; recv: n*c, block i comes from rank i.
//                                     send == recv + rank*c is allowed (in place).
//   gather(send, recv, c, root)       send: c; recv: n*c on root (unused elsewhere).
//   scatter(send, recv, c, root)      send: n*c on root (unused elsewhere); recv: c.
// Other overlaps between send and recv are not allowed.
//
// Padding rule (reduce-scatter, all-gather, gather, scatter): `c` is the per-rank SHARD count and
// every shard has the same length, so the full vector is exactly n*c elements. A caller whose
// vector has `numel` elements with numel % n != 0 pads it to padded_numel(numel, n) =
// n * shard_numel(numel, n), where shard_numel = ceil(numel / n); rank r owns elements
// [r*c, min((r+1)*c, numel)) of the real data, so the last ranks' shards end in padding (and a
// rank may own padding only). The padding takes part in reductions like any element (zero it).
//
// Element types and accuracy. f32 sums accumulate in fp32 in the backend's order. f16/bf16 sums
// accumulate in fp32: MpiComm widens its inputs to fp32 scratch, reduces in fp32 with MPI and
// rounds once when storing the result; NCCL reduces 16-bit types natively (its kernels also
// accumulate each pairwise step in fp32 but round between ring steps). The MpiComm result r of
// summing x_0..x_{n-1} satisfies |r - s| <= ulp16(s)/2 + (n-1) * 2^-24 * sum|x_i| for the exact
// sum s (one 16-bit rounding on top of fp32 accumulation). kMax is exact for every type.
//
// Byte accounting. Every communicator counts, per collective kind, the calls and the bytes this
// rank sends and receives AS THE TEXTBOOK ALGORITHM MOVES THEM, with the same formulas for every
// backend (so the engine's totals compare with ZeRO's 2Ψ / 3Ψ whatever the backend really does).
// With n ranks, e = dtype_size, S = c*e (c = count argument above), r = rank:
//   all_reduce (ring: reduce-scatter + all-gather)  sent = received = 2(n-1)S/n (integer division)
//   reduce_scatter, all_gather (ring)               sent = received = (n-1)S   (S = one shard)
//   broadcast (pipelined chain root, root+1, ..., root-1):
//                                                   received = S if r != root, else 0;
//                                                   sent = S if r != root-1 (mod n), else 0
//   reduce (pipelined chain root+1, ..., root):     sent = S if r != root, else 0;
//                                                   received = S if r != root+1 (mod n), else 0
//   gather (direct to root)                         sent = S on non-roots; received = (n-1)S on
//   root scatter (direct from root)                      sent = (n-1)S on root; received = S on
//   non-roots barrier                                         0 bytes (the call is counted)
// With n = 1 every formula gives 0, which is what LocalComm counts. Bytes are counted when a
// collective is started successfully, whatever the backend moves on the wire (MpiComm's fp32
// widening of 16-bit reductions moves twice the bytes but counts the 16-bit amount).
//
// Failures. Argument errors (null buffers, bad root, count overflow) come back as kConfig in the
// handle. Backend errors map to kComm. In checked mode (CommOptions::check_calls, or
// STRATA_COMM_CHECK=1) each collective first agrees on (kind, count, dtype, op, root) across
// ranks with one small all-reduce, and a mismatch is reported as kComm on every rank, naming the
// field and its range. wait() has a watchdog: a collective that does not complete within
// CommOptions::timeout_s (default 300 s, env STRATA_COMM_TIMEOUT_S; 0 = none) is reported
// (kind, sequence number, count, dtype, rank) and the job is aborted with abort(), so a peer that
// failed or stopped calling makes every other rank stop with a message, never hang.
//
// Ordering and thread safety. Collectives must be started in the same order on every rank.
// A Communicator is used from one thread at a time (start collectives from one thread); its
// statistics accessors are thread-safe. A CommHandle is used from one thread at a time; an
// unfinished handle waits in its destructor (it owns staging buffers the backend writes to).
// Buffers must stay valid and untouched until the handle completes.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::comm {

enum class ReduceOp : uint8_t { kSum = 0, kMax = 1 };
std::string_view reduce_op_name(ReduceOp op);  // "sum", "max"

enum class CollectiveKind : uint8_t {
  kReduce = 0,
  kGather,
  kBroadcast,
  kScatter,
  kReduceScatter,
  kAllGather,
  kAllReduce,
  kBarrier,
};
inline constexpr size_t kNumCollectiveKinds = 8;
std::string_view collective_name(CollectiveKind kind);  // "all_reduce", ...

// Shard arithmetic for the padding rule above.
constexpr size_t shard_numel(size_t numel, int ranks) {
  return ranks <= 0 ? 0 : (numel + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks);
}
constexpr size_t padded_numel(size_t numel, int ranks) {
  return shard_numel(numel, ranks) * static_cast<size_t>(ranks);
}

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // see the table at the top: full vector or per-rank shard
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
};

// Bytes one rank sends and receives for `call` under the textbook algorithms above.
struct ByteCount {
  uint64_t sent = 0;
  uint64_t received = 0;
};
ByteCount textbook_bytes(const CollectiveCall& call, int rank, int size);

struct CollectiveStats {
  uint64_t calls = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

struct CommOptions {
  double timeout_s = 300.0;  // watchdog on wait(); 0 = wait forever
  bool check_calls = false;  // agree on (kind, count, dtype, op, root) before each collective
  // Defaults, overridden by STRATA_COMM_TIMEOUT_S and STRATA_COMM_CHECK (0/1) when set.
  static CommOptions from_env();
};

class Communicator;

// What a backend returns for a started collective. poll() checks completion without blocking
// and, on completion, finishes the work (e.g. narrows fp32 scratch into the user's buffer).
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // done = true once complete; the Status is the collective's outcome (valid when done, or an
  // error that ends it early).
  virtual Status poll(bool& done) = 0;
};

// A started collective. Move-only. Default-constructed handles are complete and ok.
class [[nodiscard]] CommHandle {
 public:
  CommHandle() = default;
  CommHandle(Status finished) : done_(true), status_(std::move(finished)) {}  // NOLINT
  CommHandle(std::unique_ptr<PendingOp> op, Communicator* comm, CollectiveCall call,
             uint64_t sequence);
  CommHandle(CommHandle&& other) noexcept;
  CommHandle& operator=(CommHandle&& other) noexcept;
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  ~CommHandle();

  // True when complete (then wait() returns at once). Never blocks.
  bool test();
  // Blocks until complete and returns the outcome. Past the communicator's timeout the job is
  // aborted with a message naming the collective.
  Status wait();

 private:
  void release();
  std::unique_ptr<PendingOp> op_;
  Communicator* comm_ = nullptr;
  CollectiveCall call_;
  uint64_t sequence_ = 0;
  bool done_ = true;
  Status status_;
};

class Communicator {
 public:
  explicit Communicator(CommOptions options) : options_(options) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank and rank count among the ranks on this machine (for placement on cores / GPUs).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string_view backend() const = 0;  // "local", "mpi", "nccl"
  // True when buffers must be device memory of the CUDA device (NcclComm); false: host memory.
  virtual bool device_buffers() const { return false; }

  // Prints "strata: rank R of N aborting: <message>" to stderr and ends the whole job
  // (MPI_Abort for MPI and NCCL backends, std::abort for LocalComm). Never returns.
  [[noreturn]] virtual void abort(const Status& reason) = 0;

  // Asynchronous collectives (argument tables at the top of this file).
  CommHandle all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                              ReduceOp op = ReduceOp::kSum);
  CommHandle reduce_async(const void* send, void* recv, size_t count, DType dtype, int root,
                          ReduceOp op = ReduceOp::kSum);
  CommHandle broadcast_async(void* buf, size_t count, DType dtype, int root);
  CommHandle reduce_scatter_async(const void* send, void* recv, size_t shard_count, DType dtype,
                                  ReduceOp op = ReduceOp::kSum);
  CommHandle all_gather_async(const void* send, void* recv, size_t shard_count, DType dtype);
  CommHandle gather_async(const void* send, void* recv, size_t shard_count, DType dtype, int root);
  CommHandle scatter_async(const void* send, void* recv, size_t shard_count, DType dtype, int root);
  CommHandle barrier_async();
  CommHandle start(const CollectiveCall& call);  // any of the above

  // Stream-ordered collectives, where the backend has them (stream_ordered(): NcclComm): `call`
  // is enqueued on `stream` (the backend's stream handle: a cudaStream_t, gpu::Stream's
  // native_handle()) after the work already there, and later work of that stream runs after it.
  // Returns once enqueued: errors found then are returned, later ones surface when the stream is
  // synchronised; one that never completes ends the job past the timeout, as wait() does (the
  // backend watches it). Checked mode and byte accounting as start(). Calls must still be made in
  // the same order on every rank. kUnsupported where the backend has no streams.
  virtual bool stream_ordered() const { return false; }
  Status enqueue(const CollectiveCall& call, void* stream);

  // Synchronous wrappers: start and wait.
  Status all_reduce(const void* send, void* recv, size_t count, DType dtype,
                    ReduceOp op = ReduceOp::kSum);
  Status reduce(const void* send, void* recv, size_t count, DType dtype, int root,
                ReduceOp op = ReduceOp::kSum);
  Status broadcast(void* buf, size_t count, DType dtype, int root);
  Status reduce_scatter(const void* send, void* recv, size_t shard_count, DType dtype,
                        ReduceOp op = ReduceOp::kSum);
  Status all_gather(const void* send, void* recv, size_t shard_count, DType dtype);
  Status gather(const void* send, void* recv, size_t shard_count, DType dtype, int root);
  Status scatter(const void* send, void* recv, size_t shard_count, DType dtype, int root);
  Status barrier();

  // Byte accounting (thread-safe).
  CollectiveStats stats(CollectiveKind kind) const;
  CollectiveStats total_stats() const;
  void reset_stats();

  const CommOptions& options() const { return options_; }
  void set_timeout_s(double timeout_s) { options_.timeout_s = timeout_s; }
  void set_check_calls(bool on) { options_.check_calls = on; }

 protected:
  // Starts `call` (already validated). Errors found at once may be returned directly.
  virtual Result<std::unique_ptr<PendingOp>> start_impl(const CollectiveCall& call) = 0;
  // Enqueues `call` (already validated, sequence number `seq`) on `stream`; only where
  // stream_ordered().
  virtual Status enqueue_impl(const CollectiveCall& /*call*/, uint64_t /*seq*/, void* /*stream*/) {
    return make_error(ErrorCode::kUnsupported, backend(), " collectives are not stream-ordered");
  }
  // Checked mode: agree on the call across ranks (all ranks call this, also those whose call is
  // locally invalid); returns kComm when any field differs or any rank's call is invalid.
  // Default: nothing to check (one rank).
  virtual Status verify_call(const CollectiveCall& /*call*/, bool /*locally_valid*/) {
    return ok_status();
  }

 private:
  Status validate(const CollectiveCall& call) const;
  // Validation, the call's sequence number and (checked mode) the agreement across ranks: what
  // start() and enqueue() do before the backend sees the call. Sets `seq`.
  Status admit(const CollectiveCall& call, uint64_t& seq);
  void count(const CollectiveCall& call);

  CommOptions options_;
  uint64_t sequence_ = 0;
  mutable std::mutex stats_mutex_;
  std::array<CollectiveStats, kNumCollectiveKinds> stats_{};
};

// One-line description of a call for messages: "all_reduce #12 (count 1000, bf16, sum)".
std::string describe_call(const CollectiveCall& call, uint64_t sequence);

// Polling helper shared by backends: yields for the first second, then sleeps with a growing
// back-off (20 us .. 100 us).
class Backoff {
 public:
  void pause();

 private:
  uint64_t spins_ = 0;
  int sleep_us_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace strata::comm
