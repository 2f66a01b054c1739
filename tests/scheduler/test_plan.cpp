// Plan: validation (cycles, lanes, reads before writes, buffer lifetimes) and buffer placement
// under budgets, checked against an independent reachability computation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "scheduler/plan.h"

namespace strata::sched {
namespace {

Status nop(const TaskContext&) { return ok_status(); }

// reach[a][b]: b is reachable from a (a must complete before b starts), from every predecessor
// relation of the finalized plan.
std::vector<std::vector<bool>> reachability(const Plan& plan) {
  const size_t n = plan.num_tasks();
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  for (TaskId t : plan.order()) {
    plan.for_each_predecessor(t, [&](TaskId p) {
      reach[size_t(p)][size_t(t)] = true;
      for (size_t a = 0; a < n; ++a) {
        if (reach[a][size_t(p)]) reach[a][size_t(t)] = true;
      }
    });
  }
  return reach;
}

// Every two buffers of a tier whose memory overlaps are ordered: one is released before the
// other is acquired.
void expect_no_overlapping_lifetimes(const Plan& plan) {
  const auto reach = reachability(plan);
  for (size_t x = 0; x < plan.num_buffers(); ++x) {
    for (size_t y = x + 1; y < plan.num_buffers(); ++y) {
      const auto& a = plan.buffer(BufferId(x));
      const auto& b = plan.buffer(BufferId(y));
      if (a.tier != b.tier) continue;
      const bool overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      if (!overlap) continue;
      auto before = [&](const Plan::Buffer& first, const Plan::Buffer& second) {
        return first.released_by >= 0 && second.acquired_by >= 0 &&
               (first.released_by == second.acquired_by
                    ? false
                    : reach[size_t(first.released_by)][size_t(second.acquired_by)]);
      };
      EXPECT_TRUE(before(a, b) || before(b, a))
          << "buffers '" << a.name << "' and '" << b.name << "' share memory while both live";
    }
  }
}

// A naive read-ahead: every layer's load is ready at once; compute l uses and releases it.
Plan naive_prefetch(int layers, uint64_t bytes, std::vector<TaskId>* loads = nullptr,
                    std::vector<TaskId>* computes = nullptr) {
  Plan p;
  TaskId prev = -1;
  for (int l = 0; l < layers; ++l) {
    const BufferId b = p.add_buffer("layer" + std::to_string(l), Tier::kDevice, bytes);
    const TaskId load = p.add("load" + std::to_string(l), Lane::kH2D, nop);
    p.acquire(load, b);
    p.writes(load, b);
    const TaskId comp = p.add("compute" + std::to_string(l), Lane::kCompute, nop, {load});
    p.reads(comp, b);
    p.release(comp, b);
    if (loads) loads->push_back(load);
    if (computes) computes->push_back(comp);
    prev = comp;
  }
  (void)prev;
  return p;
}

TEST(Plan, NaivePrefetchIsBoundedByTheBudget) {
  const uint64_t mb = 1 << 20;
  std::vector<TaskId> loads, computes;
  Plan unbounded = naive_prefetch(8, mb);
  ASSERT_TRUE(unbounded.finalize().ok());
  EXPECT_EQ(unbounded.peak_bytes(Tier::kDevice), 8 * mb);  // every load may run first
  EXPECT_EQ(unbounded.num_memory_deps(), 0u);

  Plan p = naive_prefetch(8, mb, &loads, &computes);
  Budgets budgets;
  budgets.bytes[static_cast<int>(Tier::kDevice)] = 3 * mb;
  const Status st = p.finalize(budgets);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(p.peak_bytes(Tier::kDevice), 3 * mb);
  EXPECT_EQ(p.unbounded_peak_bytes(Tier::kDevice), 8 * mb);
  // The share of one kind of buffer: all of them make the peak; one layer's is its own size.
  EXPECT_EQ(p.peak_bytes_of([](BufferId) { return true; }), 3 * mb);
  EXPECT_EQ(p.peak_bytes_of([](BufferId b) { return b == 0; }), mb);
  // Load l (l >= 3) reuses the memory compute l-3 released, so it waits for it.
  for (size_t l = 3; l < loads.size(); ++l) {
    const auto& md = p.task(loads[l]).memory_deps;
    ASSERT_EQ(md.size(), 1u) << "load " << l;
    EXPECT_EQ(md[0], computes[l - 3]) << "load " << l;
  }
  expect_no_overlapping_lifetimes(p);
}

// Free memory released by a task the acquirer already waits for is reused before memory whose
// reuse would make it wait for an unrelated task (a false dependency between lanes).
TEST(Plan, ReusePrefersMemoryReleasedByAnAncestor) {
  const uint64_t mb = 1 << 20;
  Plan p;
  const BufferId y = p.add_buffer("y", Tier::kDevice, mb);
  const BufferId x = p.add_buffer("x", Tier::kDevice, mb);
  const BufferId z = p.add_buffer("z", Tier::kDevice, mb);
  // An unrelated nvme-lane pair holds y first (it is placed at offset 0).
  const TaskId ya = p.add("y acquire", Lane::kNvme, nop);
  p.acquire(ya, y);
  p.writes(ya, y);
  const TaskId yr = p.add("y release", Lane::kNvme, nop, {ya});
  p.reads(yr, y);
  p.release(yr, y);
  // The compute chain: x, released, then z.
  const TaskId xa = p.add("x acquire", Lane::kCompute, nop);
  p.acquire(xa, x);
  p.writes(xa, x);
  const TaskId xr = p.add("x release", Lane::kCompute, nop, {xa});
  p.reads(xr, x);
  p.release(xr, x);
  const TaskId za = p.add("z acquire", Lane::kCompute, nop, {xr});
  p.acquire(za, z);
  p.writes(za, z);
  p.release(za, z);
  Budgets budgets;
  budgets.bytes[static_cast<int>(Tier::kDevice)] = 2 * mb;
  const Status st = p.finalize(budgets);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(p.peak_bytes(Tier::kDevice), 2 * mb);
  EXPECT_EQ(p.buffer(z).offset, p.buffer(x).offset);
  EXPECT_TRUE(p.task(za).memory_deps.empty())
      << "z waits for " << p.task(za).memory_deps.size() << " unrelated task(s)";
  (void)yr;
  expect_no_overlapping_lifetimes(p);
}

TEST(Plan, OverBudgetIsRefusedWithItsPeak) {
  Plan p;
  const BufferId a = p.add_buffer("weights", Tier::kDevice, 3000);
  const BufferId b = p.add_buffer("activations", Tier::kDevice, 5000);
  const TaskId t = p.add("layer", Lane::kCompute, nop);
  p.acquire(t, a);
  p.acquire(t, b);
  p.writes(t, a);
  p.writes(t, b);
  Budgets budgets;
  budgets.bytes[static_cast<int>(Tier::kDevice)] = 6000;
  const Status st = p.finalize(budgets);
  ASSERT_EQ(st.code(), ErrorCode::kOutOfMemory) << st.to_string();
  // Peak with 256-byte placement: 3072 + 5120.
  EXPECT_NE(st.message().find("peak is 8192 bytes"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("budget 6000"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'layer'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'weights'"), std::string::npos) << st.message();
  EXPECT_FALSE(p.finalized());
}

TEST(Plan, WholeStepBuffersOverBudgetAreRefused) {
  Plan p;
  p.add_buffer("staging", Tier::kPinnedHost, 10000, /*initially_valid=*/true);
  p.add("t", Lane::kCpu, nop);
  Budgets budgets;
  budgets.bytes[static_cast<int>(Tier::kPinnedHost)] = 4096;
  const Status st = p.finalize(budgets);
  ASSERT_EQ(st.code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(st.message().find("pinned host"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'staging'"), std::string::npos) << st.message();
}

TEST(Plan, CyclesAreRefused) {
  Plan p;
  const TaskId a = p.add("a", Lane::kCpu, nop);
  const TaskId b = p.add("b", Lane::kNvme, nop, {a});
  p.depend(a, b);
  const Status st = p.finalize();
  ASSERT_EQ(st.code(), ErrorCode::kConfig);
  EXPECT_NE(st.message().find("cycle"), std::string::npos) << st.message();
}

TEST(Plan, DependingOnALaterTaskOfTheSameInOrderLaneIsACycle) {
  Plan p;
  const TaskId first = p.add("first", Lane::kCompute, nop);
  const TaskId second = p.add("second", Lane::kCompute, nop);
  p.depend(first, second);
  EXPECT_EQ(p.finalize().code(), ErrorCode::kConfig);
  // On the cpu lane (tasks may run at once) the same dependency is fine.
  Plan q;
  const TaskId x = q.add("x", Lane::kCpu, nop);
  const TaskId y = q.add("y", Lane::kCpu, nop);
  q.depend(x, y);
  EXPECT_TRUE(q.finalize().ok());
  EXPECT_EQ(q.order().front(), y);
}

TEST(Plan, UnknownLanesTasksAndBuffersAreRefused) {
  Plan p;
  p.add("lost", static_cast<Lane>(9), nop);
  Status st = p.finalize();
  EXPECT_EQ(st.code(), ErrorCode::kConfig);
  EXPECT_NE(st.message().find("'lost' has no lane"), std::string::npos) << st.message();
  Plan q;
  q.add("t", Lane::kCpu, nop, {7});
  EXPECT_EQ(q.finalize().code(), ErrorCode::kConfig);
  Plan r;
  const TaskId t = r.add("t", Lane::kCpu, nop);
  r.reads(t, 3);
  EXPECT_EQ(r.finalize().code(), ErrorCode::kConfig);
}

TEST(Plan, ReadingBeforeAnyWriteIsRefused) {
  Plan p;
  const BufferId b = p.add_buffer("grads", Tier::kPinnedHost, 64);
  const TaskId w = p.add("download", Lane::kD2H, nop);
  p.writes(w, b);
  const TaskId r = p.add("adam", Lane::kCpu, nop);  // forgot to depend on the download
  p.reads(r, b);
  Status st = p.finalize();
  ASSERT_EQ(st.code(), ErrorCode::kConfig);
  EXPECT_NE(st.message().find("'adam' reads buffer 'grads'"), std::string::npos) << st.message();
  p.depend(r, w);
  EXPECT_TRUE(p.finalize().ok());
  // Initially valid buffers need no writer.
  Plan q;
  const BufferId params = q.add_buffer("params", Tier::kDevice, 64, /*initially_valid=*/true);
  q.reads(q.add("forward", Lane::kCompute, nop), params);
  EXPECT_TRUE(q.finalize().ok());
}

TEST(Plan, UsingABufferOutsideItsLifetimeIsRefused) {
  Plan p;
  const BufferId b = p.add_buffer("gathered", Tier::kDevice, 64);
  const TaskId get = p.add("gather", Lane::kH2D, nop);
  p.acquire(get, b);
  p.writes(get, b);
  const TaskId use = p.add("use", Lane::kCompute, nop, {get});
  p.reads(use, b);
  const TaskId drop = p.add("drop", Lane::kCompute, nop, {get});
  p.release(drop, b);
  const TaskId late = p.add("late", Lane::kCpu, nop, {get});  // not before the release
  p.reads(late, b);
  const Status st = p.finalize();
  ASSERT_EQ(st.code(), ErrorCode::kConfig);
  EXPECT_NE(st.message().find("'late'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("releases it"), std::string::npos) << st.message();
}

TEST(Plan, UnorderedWritesAndReadsOfABufferAreRefused) {
  Plan p;
  const BufferId b = p.add_buffer("staging", Tier::kPinnedHost, 64);
  const TaskId w1 = p.add("fill", Lane::kCpu, nop);
  p.writes(w1, b);
  const TaskId r = p.add("upload", Lane::kH2D, nop, {w1});
  p.reads(r, b);
  const TaskId w2 = p.add("refill", Lane::kCpu, nop, {w1});  // may overwrite during the upload
  p.writes(w2, b);
  Status st = p.finalize();
  ASSERT_EQ(st.code(), ErrorCode::kConfig);
  EXPECT_NE(st.message().find("'upload' and 'refill'"), std::string::npos) << st.message();
  p.depend(w2, r);  // refill after the upload: fine
  EXPECT_TRUE(p.finalize().ok());
}

TEST(Plan, AReleaseThatMayRunBeforeTheAcquireIsRefused) {
  Plan p;
  const BufferId b = p.add_buffer("slot", Tier::kPinnedHost, 64);
  const TaskId get = p.add("read", Lane::kNvme, nop);
  p.acquire(get, b);
  const TaskId put = p.add("write", Lane::kNvme, nop);  // not after the read
  p.release(put, b);
  const Status st = p.finalize();
  ASSERT_EQ(st.code(), ErrorCode::kConfig);
  EXPECT_NE(st.message().find("released by 'write'"), std::string::npos) << st.message();
}

TEST(Plan, ManyBuffersOfMixedSizesNeverShareLiveMemory) {
  // Layers of different sizes with read-ahead, a mid-size budget, two tiers.
  Plan p;
  const uint64_t sizes[] = {1000, 7000, 3000, 9000, 2000, 5000, 4000, 8000, 6000, 1500};
  TaskId prev_compute = -1;
  for (int l = 0; l < 10; ++l) {
    const BufferId dev = p.add_buffer("w" + std::to_string(l), Tier::kDevice, sizes[l]);
    const BufferId host = p.add_buffer("g" + std::to_string(l), Tier::kPinnedHost, sizes[9 - l]);
    const TaskId load = p.add("load" + std::to_string(l), Lane::kH2D, nop);
    p.acquire(load, dev);
    p.writes(load, dev);
    std::vector<TaskId> deps{load};
    if (prev_compute >= 0) deps.push_back(prev_compute);
    const TaskId comp = p.add("compute" + std::to_string(l), Lane::kCompute, nop, deps);
    p.reads(comp, dev);
    p.acquire(comp, host);
    p.writes(comp, host);
    p.release(comp, dev);
    const TaskId opt = p.add("opt" + std::to_string(l), Lane::kCpu, nop, {comp});
    p.reads(opt, host);
    p.release(opt, host);
    prev_compute = comp;
  }
  Budgets budgets;
  budgets.bytes[0] = 20000;
  budgets.bytes[1] = 16000;
  const Status st = p.finalize(budgets);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_LE(p.peak_bytes(Tier::kDevice), 20000u);
  EXPECT_LE(p.peak_bytes(Tier::kPinnedHost), 16000u);
  expect_no_overlapping_lifetimes(p);
}

}  // namespace
}  // namespace strata::sched
