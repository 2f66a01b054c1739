// MpiComm under mpirun -np 2/3/4: every collective for every dtype and odd sizes against a
// float64 reference computed locally from every rank's (deterministic) input, in-place forms,
// the padding rule, async overlap, byte accounting by the documented ring formulas, and
// checked-mode mismatch detection.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "comm/gather_text.h"
#include "comm/mpi_comm.h"
#include "comm_test_util.h"
#include "core/check.h"
#include "mpi_world.h"

namespace strata::comm {
namespace {

using testing::Buf;
using testing::input_value;
using testing::make_input;
using testing::sum_tolerance;

Communicator& world() { return testing::mpi_world(); }

constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr size_t kCounts[] = {0, 1, 7, 1000, 4099};

uint64_t seed_of(CollectiveKind k, DType t, size_t c, int extra) {
  return (static_cast<uint64_t>(k) << 40) ^ (static_cast<uint64_t>(t) << 32) ^ (c << 4) ^
         static_cast<uint64_t>(extra);
}

// Expected bytes, written from the header's table (independently of textbook_bytes).
struct Expect {
  uint64_t sent = 0;
  uint64_t recv = 0;
};
Expect expected_bytes(CollectiveKind k, size_t c, DType t, int r, int n, int root) {
  const uint64_t s = c * dtype_size(t);
  const uint64_t nn = static_cast<uint64_t>(n);
  switch (k) {
    case CollectiveKind::kAllReduce: return {2 * (nn - 1) * s / nn, 2 * (nn - 1) * s / nn};
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather: return {(nn - 1) * s, (nn - 1) * s};
    case CollectiveKind::kBroadcast: return {r == (root + n - 1) % n ? 0 : s, r == root ? 0 : s};
    case CollectiveKind::kReduce: return {r == root ? 0 : s, r == (root + 1) % n ? 0 : s};
    case CollectiveKind::kGather: return {r == root ? 0 : s, r == root ? (nn - 1) * s : 0};
    case CollectiveKind::kScatter: return {r == root ? (nn - 1) * s : 0, r == root ? 0 : s};
    case CollectiveKind::kBarrier: return {0, 0};
  }
  return {};
}

// Runs `fn` and checks that exactly one call of `kind` with the expected bytes was counted.
template <typename Fn>
void expect_counted(CollectiveKind kind, size_t c, DType t, int root, Fn&& fn) {
  Communicator& comm = world();
  const CollectiveStats before = comm.stats(kind);
  fn();
  const CollectiveStats after = comm.stats(kind);
  const Expect e = expected_bytes(kind, c, t, comm.rank(), comm.size(), root);
  EXPECT_EQ(after.calls - before.calls, 1u) << collective_name(kind);
  EXPECT_EQ(after.bytes_sent - before.bytes_sent, e.sent) << collective_name(kind) << " c=" << c;
  EXPECT_EQ(after.bytes_received - before.bytes_received, e.recv)
      << collective_name(kind) << " c=" << c;
}

// Reference reduction over ranks of element i, and the tolerance for it.
struct RefValue {
  double value;
  double tol;
};
RefValue reference(uint64_t seed, int n, size_t i, DType t, ReduceOp op) {
  double acc = op == ReduceOp::kSum ? 0.0 : -INFINITY;
  double sum_abs = 0.0;
  for (int r = 0; r < n; ++r) {
    const double x = input_value(seed, r, i, t);
    acc = op == ReduceOp::kSum ? acc + x : std::max(acc, x);
    sum_abs += std::fabs(x);
  }
  return {acc, op == ReduceOp::kSum ? sum_tolerance(t, n, acc, sum_abs) : 0.0};
}

TEST(MpiComm, RankCountMatchesLauncher) {
  Communicator& comm = world();
  EXPECT_EQ(comm.backend(), "mpi");
  if (const char* np = std::getenv("STRATA_TEST_NP")) {
    EXPECT_EQ(comm.size(), std::atoi(np));
  }
  EXPECT_GE(comm.local_size(), 1);
  EXPECT_LT(comm.local_rank(), comm.local_size());
}

TEST(MpiComm, AllReduceEveryTypeSizeAndOp) {
  Communicator& comm = world();
  const int n = comm.size();
  for (DType t : kTypes) {
    for (size_t c : kCounts) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        const uint64_t seed = seed_of(CollectiveKind::kAllReduce, t, c, static_cast<int>(op));
        Buf in = make_input(seed, comm.rank(), c, t);
        Buf out(t, c);
        expect_counted(CollectiveKind::kAllReduce, c, t, 0,
                       [&] { ASSERT_TRUE(comm.all_reduce(in.data(), out.data(), c, t, op).ok()); });
        for (size_t i = 0; i < c; ++i) {
          const RefValue ref = reference(seed, n, i, t, op);
          ASSERT_NEAR(out.at(i), ref.value, ref.tol)
              << dtype_name(t) << " " << reduce_op_name(op) << " c=" << c << " i=" << i;
        }
      }
    }
  }
}

TEST(MpiComm, ReduceToEveryRoot) {
  Communicator& comm = world();
  const int n = comm.size();
  for (DType t : kTypes) {
    for (size_t c : {size_t{1}, size_t{1000}}) {
      for (int root : {0, n - 1}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          const uint64_t seed = seed_of(CollectiveKind::kReduce, t, c, root * 2 + (int)op);
          Buf in = make_input(seed, comm.rank(), c, t);
          Buf out(t, c);
          expect_counted(CollectiveKind::kReduce, c, t, root, [&] {
            ASSERT_TRUE(comm.reduce(in.data(), out.data(), c, t, root, op).ok());
          });
          if (comm.rank() != root) continue;
          for (size_t i = 0; i < c; ++i) {
            const RefValue ref = reference(seed, n, i, t, op);
            ASSERT_NEAR(out.at(i), ref.value, ref.tol) << dtype_name(t) << " i=" << i;
          }
        }
      }
    }
  }
}

TEST(MpiComm, BroadcastFromEveryRoot) {
  Communicator& comm = world();
  for (DType t : kTypes) {
    for (size_t c : kCounts) {
      for (int root = 0; root < comm.size(); ++root) {
        const uint64_t seed = seed_of(CollectiveKind::kBroadcast, t, c, root);
        Buf buf = comm.rank() == root ? make_input(seed, root, c, t) : Buf(t, c);
        expect_counted(CollectiveKind::kBroadcast, c, t, root,
                       [&] { ASSERT_TRUE(comm.broadcast(buf.data(), c, t, root).ok()); });
        for (size_t i = 0; i < c; ++i) ASSERT_EQ(buf.at(i), input_value(seed, root, i, t));
      }
    }
  }
}

TEST(MpiComm, ReduceScatterEveryTypeSizeAndOp) {
  Communicator& comm = world();
  const int n = comm.size();
  const size_t me = static_cast<size_t>(comm.rank());
  for (DType t : kTypes) {
    for (size_t c : kCounts) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        const uint64_t seed = seed_of(CollectiveKind::kReduceScatter, t, c, (int)op);
        Buf in = make_input(seed, comm.rank(), c * n, t);
        Buf out(t, c);
        expect_counted(CollectiveKind::kReduceScatter, c, t, 0, [&] {
          ASSERT_TRUE(comm.reduce_scatter(in.data(), out.data(), c, t, op).ok());
        });
        for (size_t i = 0; i < c; ++i) {
          const RefValue ref = reference(seed, n, me * c + i, t, op);
          ASSERT_NEAR(out.at(i), ref.value, ref.tol) << dtype_name(t) << " c=" << c;
        }
      }
    }
  }
}

TEST(MpiComm, AllGatherGatherScatter) {
  Communicator& comm = world();
  const int n = comm.size();
  const int me = comm.rank();
  for (DType t : kTypes) {
    for (size_t c : kCounts) {
      const uint64_t seed = seed_of(CollectiveKind::kAllGather, t, c, 0);
      Buf in = make_input(seed, me, c, t);
      Buf out(t, c * n);
      expect_counted(CollectiveKind::kAllGather, c, t, 0,
                     [&] { ASSERT_TRUE(comm.all_gather(in.data(), out.data(), c, t).ok()); });
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < c; ++i) ASSERT_EQ(out.at(r * c + i), input_value(seed, r, i, t));
      }
      for (int root : {0, n - 1}) {
        Buf gathered(t, me == root ? c * n : 0);
        expect_counted(CollectiveKind::kGather, c, t, root, [&] {
          ASSERT_TRUE(
              comm.gather(in.data(), me == root ? gathered.data() : nullptr, c, t, root).ok());
        });
        if (me == root) {
          for (int r = 0; r < n; ++r) {
            for (size_t i = 0; i < c; ++i) {
              ASSERT_EQ(gathered.at(r * c + i), input_value(seed, r, i, t));
            }
          }
        }
        const uint64_t sseed = seed_of(CollectiveKind::kScatter, t, c, root);
        Buf whole = me == root ? make_input(sseed, root, c * n, t) : Buf(t, 0);
        Buf part(t, c);
        expect_counted(CollectiveKind::kScatter, c, t, root, [&] {
          ASSERT_TRUE(
              comm.scatter(me == root ? whole.data() : nullptr, part.data(), c, t, root).ok());
        });
        for (size_t i = 0; i < c; ++i) {
          ASSERT_EQ(part.at(i), input_value(sseed, root, me * c + i, t));
        }
      }
    }
  }
}

TEST(MpiComm, InPlaceForms) {
  Communicator& comm = world();
  const int n = comm.size();
  const int me = comm.rank();
  const size_t c = 33;
  for (DType t : kTypes) {
    const uint64_t seed = seed_of(CollectiveKind::kAllReduce, t, c, 99);
    // all_reduce: send == recv.
    Buf a = make_input(seed, me, c, t);
    ASSERT_TRUE(comm.all_reduce(a.data(), a.data(), c, t).ok());
    for (size_t i = 0; i < c; ++i) {
      const RefValue ref = reference(seed, n, i, t, ReduceOp::kSum);
      ASSERT_NEAR(a.at(i), ref.value, ref.tol);
    }
    // reduce_scatter: recv == send + rank*c.
    Buf rs = make_input(seed, me, c * n, t);
    ASSERT_TRUE(comm.reduce_scatter(rs.data(), rs.byte_ptr(me * c), c, t).ok());
    for (size_t i = 0; i < c; ++i) {
      const RefValue ref = reference(seed, n, me * c + i, t, ReduceOp::kSum);
      ASSERT_NEAR(rs.at(me * c + i), ref.value, ref.tol);
    }
    // all_gather: send == recv + rank*c.
    Buf ag(t, c * n);
    for (size_t i = 0; i < c; ++i) ag.set(me * c + i, input_value(seed, me, i, t));
    ASSERT_TRUE(comm.all_gather(ag.byte_ptr(me * c), ag.data(), c, t).ok());
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < c; ++i) ASSERT_EQ(ag.at(r * c + i), input_value(seed, r, i, t));
    }
    // gather at root: send == recv + root*c; scatter at root: recv == send + root*c.
    const int root = n - 1;
    Buf g(t, c * n);
    Buf mine = make_input(seed, me, c, t);
    const void* gsend = mine.data();
    if (me == root) {
      std::memcpy(g.byte_ptr(root * c), mine.data(), c * dtype_size(t));
      gsend = g.byte_ptr(root * c);
    }
    ASSERT_TRUE(comm.gather(gsend, g.data(), c, t, root).ok());
    if (me == root) {
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < c; ++i) ASSERT_EQ(g.at(r * c + i), input_value(seed, r, i, t));
      }
      ASSERT_TRUE(comm.scatter(g.data(), g.byte_ptr(root * c), c, t, root).ok());
      for (size_t i = 0; i < c; ++i) ASSERT_EQ(g.at(root * c + i), input_value(seed, root, i, t));
    } else {
      Buf part(t, c);
      ASSERT_TRUE(comm.scatter(nullptr, part.data(), c, t, root).ok());
      for (size_t i = 0; i < c; ++i) ASSERT_EQ(part.at(i), input_value(seed, me, i, t));
    }
    // reduce at root in place.
    Buf red = make_input(seed, me, c, t);
    ASSERT_TRUE(comm.reduce(red.data(), red.data(), c, t, root).ok());
    if (me == root) {
      for (size_t i = 0; i < c; ++i) {
        const RefValue ref = reference(seed, n, i, t, ReduceOp::kSum);
        ASSERT_NEAR(red.at(i), ref.value, ref.tol);
      }
    }
  }
}

// The padding rule: a vector of numel elements (numel % n != 0) is padded with zeros to
// padded_numel; reduce-scatter then all-gather of the shards equals the all-reduce of the vector.
TEST(MpiComm, PaddingRuleForUnevenSizes) {
  Communicator& comm = world();
  const int n = comm.size();
  const int me = comm.rank();
  for (DType t : kTypes) {
    for (size_t numel : {size_t{1}, size_t{5}, size_t{1001}, size_t{4099}}) {
      const size_t shard = shard_numel(numel, n);
      const size_t padded = padded_numel(numel, n);
      ASSERT_EQ(shard, (numel + n - 1) / n);
      ASSERT_GE(padded, numel);
      ASSERT_LT(padded - numel, static_cast<size_t>(n));
      const uint64_t seed = seed_of(CollectiveKind::kReduceScatter, t, numel, 7);
      Buf full(t, padded);  // zero padding
      for (size_t i = 0; i < numel; ++i) full.set(i, input_value(seed, me, i, t));
      Buf mine(t, shard);
      ASSERT_TRUE(comm.reduce_scatter(full.data(), mine.data(), shard, t).ok());
      Buf back(t, padded);
      ASSERT_TRUE(comm.all_gather(mine.data(), back.data(), shard, t).ok());
      for (size_t i = 0; i < numel; ++i) {
        const RefValue ref = reference(seed, n, i, t, ReduceOp::kSum);
        ASSERT_NEAR(back.at(i), ref.value, ref.tol) << "numel=" << numel << " i=" << i;
      }
      for (size_t i = numel; i < padded; ++i) ASSERT_EQ(back.at(i), 0.0);
    }
  }
}

TEST(MpiComm, AsyncHandlesOverlapWithLocalWork) {
  Communicator& comm = world();
  const int n = comm.size();
  const size_t c = 1 << 18;
  const uint64_t seed = 4242;
  Buf in = make_input(seed, comm.rank(), c, DType::kF32);
  Buf out(DType::kF32, c);
  Buf small_in = make_input(seed + 1, comm.rank(), 100, DType::kBF16);
  Buf small_out(DType::kBF16, 100 * n);
  CommHandle big = comm.all_reduce_async(in.data(), out.data(), c, DType::kF32);
  CommHandle small = comm.all_gather_async(small_in.data(), small_out.data(), 100, DType::kBF16);
  CommHandle bar = comm.barrier_async();
  // Local work while the collectives are in flight, driving progress with test().
  double local = 0.0;
  int polls = 0;
  for (size_t i = 0; i < c; ++i) {
    local += std::sqrt(static_cast<double>(i));
    if (i % 4096 == 0) {
      ++polls;
      (void)big.test();
    }
  }
  EXPECT_GT(local, 0.0);
  EXPECT_GT(polls, 0);
  // Wait out of start order.
  ASSERT_TRUE(bar.wait().ok());
  ASSERT_TRUE(small.wait().ok());
  ASSERT_TRUE(big.wait().ok());
  EXPECT_TRUE(big.test());
  for (size_t i = 0; i < c; i += 997) {
    const RefValue ref = reference(seed, n, i, DType::kF32, ReduceOp::kSum);
    ASSERT_NEAR(out.at(i), ref.value, ref.tol);
  }
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < 100; ++i) {
      ASSERT_EQ(small_out.at(r * 100 + i), input_value(seed + 1, r, i, DType::kBF16));
    }
  }
  // A moved-from handle is complete; a moved-to handle carries the operation.
  CommHandle h = comm.barrier_async();
  CommHandle moved = std::move(h);
  EXPECT_TRUE(h.test());
  EXPECT_TRUE(moved.wait().ok());
}

// ZeRO's arithmetic (DESIGN.md §1): reduce-scatter + all-gather of Ψ 16-bit elements moves the
// same bytes per rank as one all-reduce, 2(n-1)/n * 2Ψ, and stage 3's extra all-gather makes 3Ψ.
TEST(MpiComm, ByteTotalsMatchZeroCommunicationVolume) {
  Communicator& comm = world();
  const int n = comm.size();
  const size_t psi = 1200 * static_cast<size_t>(n);
  const size_t shard = psi / n;
  Buf grads(DType::kBF16, psi);
  Buf shard_buf(DType::kBF16, shard);
  Buf params(DType::kBF16, psi);
  comm.reset_stats();
  ASSERT_TRUE(comm.reduce_scatter(grads.data(), shard_buf.data(), shard, DType::kBF16).ok());
  ASSERT_TRUE(comm.all_gather(shard_buf.data(), params.data(), shard, DType::kBF16).ok());
  const CollectiveStats stage2 = comm.total_stats();
  const uint64_t two_psi_bytes = 2 * psi;  // Ψ elements of 2 bytes
  EXPECT_EQ(stage2.bytes_sent, 2 * two_psi_bytes * (n - 1) / n);
  EXPECT_EQ(stage2.bytes_received, stage2.bytes_sent);
  comm.reset_stats();
  ASSERT_TRUE(comm.all_reduce(grads.data(), params.data(), psi, DType::kBF16).ok());
  EXPECT_EQ(comm.total_stats().bytes_sent, stage2.bytes_sent);
  comm.reset_stats();
  ASSERT_TRUE(comm.all_gather(shard_buf.data(), params.data(), shard, DType::kBF16).ok());
  ASSERT_TRUE(comm.all_gather(shard_buf.data(), params.data(), shard, DType::kBF16).ok());
  ASSERT_TRUE(comm.reduce_scatter(grads.data(), shard_buf.data(), shard, DType::kBF16).ok());
  EXPECT_EQ(comm.total_stats().bytes_sent, 3 * two_psi_bytes * (n - 1) / n);
  EXPECT_EQ(comm.stats(CollectiveKind::kAllGather).calls, 2u);
}

TEST(MpiComm, CheckedModeReportsMismatchesOnEveryRank) {
  Communicator& comm = world();
  const int me = comm.rank();
  comm.set_check_calls(true);
  Buf in(DType::kF32, 16);
  Buf out(DType::kF32, 16);
  // Count differs on the last rank.
  const size_t count = me == comm.size() - 1 ? 11 : 10;
  Status s = comm.all_reduce(in.data(), out.data(), count, DType::kF32);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kComm);
  EXPECT_NE(s.message().find("count"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("min 10, max 11"), std::string::npos) << s.message();
  // Dtype differs on rank 0.
  s = comm.all_reduce(in.data(), out.data(), 4, me == 0 ? DType::kBF16 : DType::kF32);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("dtype"), std::string::npos) << s.message();
  // Different collectives.
  if (me == 0) {
    s = comm.broadcast(in.data(), 4, DType::kF32, 0);
  } else {
    s = comm.all_reduce(in.data(), out.data(), 4, DType::kF32);
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("different collectives"), std::string::npos) << s.message();
  // An invalid root on one rank: that rank gets kConfig, every other rank kComm.
  s = comm.broadcast(in.data(), 4, DType::kF32, me == 0 ? 99 : 0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), me == 0 ? ErrorCode::kConfig : ErrorCode::kComm) << s.to_string();
  // Matching calls still work in checked mode.
  ASSERT_TRUE(comm.all_reduce(in.data(), out.data(), 16, DType::kF32).ok());
  comm.set_check_calls(false);
}

TEST(MpiComm, BadArgumentsAreErrorsNotCrashes) {
  Communicator& comm = world();
  // Consistent on every rank, so nobody waits: root out of range, null buffers.
  Status s = comm.broadcast(nullptr, 0, DType::kF32, comm.size());
  EXPECT_EQ(s.code(), ErrorCode::kConfig);
  EXPECT_NE(s.message().find("root"), std::string::npos);
  s = comm.all_reduce(nullptr, nullptr, 5, DType::kF32);
  EXPECT_EQ(s.code(), ErrorCode::kConfig);
  EXPECT_NE(s.message().find("null"), std::string::npos);
  ASSERT_TRUE(comm.barrier().ok());
}

// gather_text: strings of different lengths (one empty, one odd, one long) reach the root whole,
// in rank order, at every root; other ranks get nothing; all-empty strings arrive empty.
TEST(MpiComm, GatherTextCarriesEveryRanksStringWhole) {
  Communicator& comm = world();
  const int n = comm.size();
  auto text_of = [](int r) {
    std::string t;
    for (int i = 0; i < (r == 1 ? 0 : 1000 * r + 3); ++i) t.push_back(char('a' + (r + i) % 26));
    return t;
  };
  for (int root = 0; root < n; ++root) {
    auto got = gather_text(comm, text_of(comm.rank()), root);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    if (comm.rank() != root) {
      EXPECT_TRUE(got->empty());
      continue;
    }
    ASSERT_EQ(got->size(), size_t(n));
    for (int r = 0; r < n; ++r) EXPECT_EQ((*got)[size_t(r)], text_of(r)) << "rank " << r;
  }
  auto empty = gather_text(comm, "", 0);
  ASSERT_TRUE(empty.ok());
  if (comm.rank() == 0) {
    EXPECT_EQ(*empty, std::vector<std::string>(size_t(n)));
  }
}

}  // namespace
}  // namespace strata::comm
