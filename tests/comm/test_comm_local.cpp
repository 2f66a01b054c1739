// LocalComm (one rank), the registry, and properties of the byte-accounting formulas.
#include <gtest/gtest.h>

#include "comm/comm.h"
#include "comm/local_comm.h"
#include "comm_test_util.h"

namespace strata::comm {
namespace {

using testing::Buf;
using testing::input_value;
using testing::make_input;

TEST(LocalComm, EveryCollectiveIsTheIdentityAndCountsNoBytes) {
  auto comm = create_local_comm();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->backend(), "local");
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    const size_t c = 37;
    Buf in = make_input(11, 0, c, t);
    Buf out(t, c);
    ASSERT_TRUE(comm->all_reduce(in.data(), out.data(), c, t).ok());
    EXPECT_EQ(out.bytes, in.bytes);
    Buf o2(t, c);
    ASSERT_TRUE(comm->reduce(in.data(), o2.data(), c, t, 0, ReduceOp::kMax).ok());
    EXPECT_EQ(o2.bytes, in.bytes);
    Buf o3(t, c);
    ASSERT_TRUE(comm->reduce_scatter(in.data(), o3.data(), c, t).ok());
    EXPECT_EQ(o3.bytes, in.bytes);
    Buf o4(t, c);
    ASSERT_TRUE(comm->all_gather(in.data(), o4.data(), c, t).ok());
    EXPECT_EQ(o4.bytes, in.bytes);
    Buf o5(t, c);
    ASSERT_TRUE(comm->gather(in.data(), o5.data(), c, t, 0).ok());
    EXPECT_EQ(o5.bytes, in.bytes);
    Buf o6(t, c);
    ASSERT_TRUE(comm->scatter(in.data(), o6.data(), c, t, 0).ok());
    EXPECT_EQ(o6.bytes, in.bytes);
    Buf b = in;
    ASSERT_TRUE(comm->broadcast(b.data(), c, t, 0).ok());
    EXPECT_EQ(b.bytes, in.bytes);
    ASSERT_TRUE(comm->all_reduce(b.data(), b.data(), c, t).ok());  // in place
    EXPECT_EQ(b.bytes, in.bytes);
  }
  ASSERT_TRUE(comm->barrier().ok());
  EXPECT_EQ(comm->stats(CollectiveKind::kAllReduce).calls, 6u);
  EXPECT_EQ(comm->stats(CollectiveKind::kBarrier).calls, 1u);
  const CollectiveStats total = comm->total_stats();
  EXPECT_EQ(total.calls, 3u * 8u + 1u);
  EXPECT_EQ(total.bytes_sent, 0u);
  EXPECT_EQ(total.bytes_received, 0u);
  comm->reset_stats();
  EXPECT_EQ(comm->total_stats().calls, 0u);
}

TEST(LocalComm, AsyncHandlesAndArgumentErrors) {
  auto comm = create_local_comm();
  Buf in = make_input(3, 0, 8, DType::kF32);
  Buf out(DType::kF32, 8);
  CommHandle h = comm->all_reduce_async(in.data(), out.data(), 8, DType::kF32);
  EXPECT_TRUE(h.test());
  EXPECT_TRUE(h.wait().ok());
  EXPECT_EQ(out.bytes, in.bytes);
  CommHandle bad = comm->broadcast_async(in.data(), 8, DType::kF32, 1);
  Status s = bad.wait();
  EXPECT_EQ(s.code(), ErrorCode::kConfig);
  EXPECT_NE(s.message().find("root 1"), std::string::npos) << s.message();
  s = comm->all_gather(nullptr, out.data(), 8, DType::kF32);
  EXPECT_EQ(s.code(), ErrorCode::kConfig);
  // Zero elements need no buffers.
  EXPECT_TRUE(comm->all_reduce(nullptr, nullptr, 0, DType::kBF16).ok());
}

TEST(Registry, ParsesBackendsAndCreatesLocal) {
  EXPECT_EQ(parse_backend("mpi").value(), Backend::kMpi);
  EXPECT_EQ(parse_backend("nccl").value(), Backend::kNccl);
  const auto bad = parse_backend("gloo");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gloo"), std::string::npos);
  auto local = create_communicator(Backend::kLocal);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ((*local)->backend(), "local");
  if (!nccl_built()) {
    EXPECT_EQ(create_communicator(Backend::kNccl).status().code(), ErrorCode::kUnsupported);
  }
}

TEST(Accounting, FormulasConserveBytesAndVanishForOneRank) {
  for (int n = 1; n <= 8; ++n) {
    for (int k = 0; k < static_cast<int>(kNumCollectiveKinds); ++k) {
      for (int root = 0; root < n; ++root) {
        for (DType t : {DType::kF32, DType::kBF16}) {
          CollectiveCall call{
              static_cast<CollectiveKind>(k), nullptr, nullptr, 1001, t, ReduceOp::kSum, root};
          uint64_t sent = 0;
          uint64_t recv = 0;
          for (int r = 0; r < n; ++r) {
            const ByteCount b = textbook_bytes(call, r, n);
            sent += b.sent;
            recv += b.received;
          }
          // Every byte sent by one rank is received by another.
          EXPECT_EQ(sent, recv) << collective_name(call.kind) << " n=" << n;
          if (n == 1) {
            EXPECT_EQ(sent, 0u);
          }
          const uint64_t s = 1001 * dtype_size(t);
          if (call.kind == CollectiveKind::kBroadcast || call.kind == CollectiveKind::kReduce) {
            EXPECT_EQ(sent, (n - 1) * s);  // a chain moves S over n-1 links
          }
          if (call.kind == CollectiveKind::kAllGather) {
            EXPECT_EQ(sent, n * (n - 1) * s);
          }
        }
      }
    }
  }
}

TEST(Accounting, PaddingHelpers) {
  EXPECT_EQ(shard_numel(10, 4), 3u);
  EXPECT_EQ(padded_numel(10, 4), 12u);
  EXPECT_EQ(shard_numel(12, 4), 3u);
  EXPECT_EQ(padded_numel(0, 3), 0u);
  EXPECT_EQ(shard_numel(1, 3), 1u);
}

}  // namespace
}  // namespace strata::comm
