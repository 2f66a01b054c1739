// NcclComm on CUDA device buffers (label gpu; under mpirun -np 1 and 2). Skips when this machine
// has fewer GPUs than local ranks. References are float64 sums of the (dtype-rounded) inputs;
// NCCL rounds 16-bit partial sums between ring steps, so the tolerance is (n-1) half-ulps at the
// magnitude of sum|x| plus the fp32 accumulation term.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "comm/nccl_comm.h"
#include "comm_test_util.h"
#include "core/check.h"
#include "cpu/topology.h"
#include "gpu/device.h"

namespace strata::comm {
namespace {

using testing::Buf;
using testing::input_value;
using testing::make_input;

struct Fixture {
  std::unique_ptr<gpu::Device> device;
  std::unique_ptr<gpu::Stream> stream;
  std::unique_ptr<Communicator> comm;
};

Fixture* fixture() {
  static Fixture* f = []() -> Fixture* {
    const cpu::LocalRankInfo local = cpu::local_rank_from_env();
    if (nccl_device_count() < local.local_size) return nullptr;
    auto* fx = new Fixture();
    gpu::DeviceOptions dopt;
    dopt.ordinal = local.local_rank;
    dopt.memory_limit_bytes = size_t{256} << 20;
    auto dev = gpu::create_device(gpu::DeviceKind::kCuda, dopt);
    if (!dev.ok()) {  // a GPU per rank is there: failing to open it is a failure, not a skip
      ADD_FAILURE() << dev.status().to_string();
      return nullptr;
    }
    fx->device = std::move(dev).value();
    fx->stream = std::move(fx->device->create_stream()).value();
    CommOptions o;
    o.timeout_s = 120.0;
    auto comm = create_nccl_comm(o, local.local_rank);
    if (!comm.ok()) {
      ADD_FAILURE() << comm.status().to_string();
      return nullptr;
    }
    fx->comm = std::move(comm).value();
    return fx;
  }();
  return f;
}

// Host -> device -> collective -> host.
struct DevBuf {
  gpu::DeviceBuffer mem;
  void upload(Fixture& f, const Buf& b) {
    ASSERT_TRUE(
        f.stream->copy_now(mem.data(), b.data(), b.bytes.size(), gpu::CopyKind::kHostToDevice)
            .ok());
    ASSERT_TRUE(f.stream->synchronize().ok());
  }
  void download(Fixture& f, Buf& b) {
    ASSERT_TRUE(
        f.stream->copy_now(b.data(), mem.data(), b.bytes.size(), gpu::CopyKind::kDeviceToHost)
            .ok());
    ASSERT_TRUE(f.stream->synchronize().ok());
  }
};

DevBuf alloc(Fixture& f, DType t, size_t n) {
  auto m = f.device->allocate(std::max<size_t>(1, n * dtype_size(t)));
  STRATA_CHECK_OK(m.status());
  return DevBuf{std::move(m).value()};
}

double tol(DType t, int n, double s, double sum_abs) {
  const double acc = (n - 1) * std::ldexp(1.0, -24) * sum_abs;
  if (t == DType::kF32) return acc;
  return std::max(1, n - 1) * 0.5 * testing::ulp_of(t, sum_abs) + acc + 0.5 * testing::ulp_of(t, s);
}

TEST(NcclComm, ReduceFamilyAndDataMovement) {
  Fixture* f = fixture();
  if (f == nullptr) GTEST_SKIP() << "fewer CUDA GPUs than local ranks (or none)";
  Communicator& comm = *f->comm;
  const int n = comm.size();
  const int me = comm.rank();
  EXPECT_EQ(comm.backend(), "nccl");
  EXPECT_TRUE(comm.device_buffers());
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (size_t c : {size_t{1}, size_t{7}, size_t{4099}}) {
      const uint64_t seed = 77 + c + static_cast<uint64_t>(t);
      // all_reduce (sum) and reduce_scatter over n*c.
      Buf in = make_input(seed, me, c * n, t);
      DevBuf d_in = alloc(*f, t, c * n);
      DevBuf d_out = alloc(*f, t, c * n);
      d_in.upload(*f, in);
      comm.reset_stats();
      ASSERT_TRUE(comm.all_reduce(d_in.mem.data(), d_out.mem.data(), c * n, t).ok());
      EXPECT_EQ(comm.stats(CollectiveKind::kAllReduce).bytes_sent,
                2ull * (n - 1) * c * n * dtype_size(t) / n);
      Buf out(t, c * n);
      d_out.download(*f, out);
      for (size_t i = 0; i < c * n; ++i) {
        double s = 0, a = 0;
        for (int r = 0; r < n; ++r) {
          s += input_value(seed, r, i, t);
          a += std::fabs(input_value(seed, r, i, t));
        }
        ASSERT_NEAR(out.at(i), s, tol(t, n, s, a)) << dtype_name(t) << " i=" << i;
      }
      ASSERT_TRUE(
          comm.reduce_scatter(d_in.mem.data(), d_out.mem.data(), c, t, ReduceOp::kMax).ok());
      Buf shard(t, c);
      d_out.download(*f, shard);
      for (size_t i = 0; i < c; ++i) {
        double m = -INFINITY;
        for (int r = 0; r < n; ++r) m = std::max(m, input_value(seed, r, me * c + i, t));
        ASSERT_EQ(shard.at(i), m);
      }
      // all_gather, gather, scatter, broadcast of this rank's first c inputs.
      Buf mine = make_input(seed, me, c, t);
      DevBuf d_mine = alloc(*f, t, c);
      d_mine.upload(*f, mine);
      ASSERT_TRUE(comm.all_gather(d_mine.mem.data(), d_out.mem.data(), c, t).ok());
      d_out.download(*f, out);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < c; ++i) ASSERT_EQ(out.at(r * c + i), input_value(seed, r, i, t));
      const int root = n - 1;
      ASSERT_TRUE(comm.gather(d_mine.mem.data(), d_out.mem.data(), c, t, root).ok());
      if (me == root) {
        d_out.download(*f, out);
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < c; ++i) ASSERT_EQ(out.at(r * c + i), input_value(seed, r, i, t));
      }
      ASSERT_TRUE(comm.scatter(d_in.mem.data(), d_mine.mem.data(), c, t, root).ok());
      d_mine.download(*f, mine);
      for (size_t i = 0; i < c; ++i) ASSERT_EQ(mine.at(i), input_value(seed, root, me * c + i, t));
      ASSERT_TRUE(comm.broadcast(d_in.mem.data(), c * n, t, 0).ok());
      d_in.download(*f, in);
      for (size_t i = 0; i < c * n; ++i) ASSERT_EQ(in.at(i), input_value(seed, 0, i, t));
      // reduce (sum) to root 0 of the broadcast vector: n copies of rank 0's values.
      ASSERT_TRUE(comm.reduce(d_in.mem.data(), d_out.mem.data(), c, t, 0).ok());
      if (me == 0) {
        Buf red(t, c);
        d_out.download(*f, red);
        for (size_t i = 0; i < c; ++i) {
          const double v = input_value(seed, 0, i, t);
          ASSERT_NEAR(red.at(i), n * v, tol(t, n, n * v, n * std::fabs(v))) << dtype_name(t);
        }
      }
      // In place and asynchronous: all_reduce with send == recv, polled with test().
      CommHandle h = comm.start(CollectiveCall{CollectiveKind::kAllReduce, d_in.mem.data(),
                                               d_in.mem.data(), c * n, t, ReduceOp::kSum, 0});
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!h.test() && std::chrono::steady_clock::now() < deadline) {
      }
      ASSERT_TRUE(h.wait().ok());
      d_in.download(*f, in);
      for (size_t i = 0; i < c * n; ++i) {
        const double v = input_value(seed, 0, i, t);
        ASSERT_NEAR(in.at(i), n * v, tol(t, n, n * v, n * std::fabs(v))) << dtype_name(t);
      }
    }
  }
  ASSERT_TRUE(comm.barrier().ok());
}

}  // namespace
}  // namespace strata::comm
