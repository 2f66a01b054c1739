// Cost model: simulated step times of small plans whose answer is known by hand (chains, overlap
// across lanes, lane capacity, shared cores, per-task overhead), and on random plans the bounds
// any schedule obeys: at least the longest dependency chain, at most the sum of all durations.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "scheduler/cost_model.h"

namespace strata::sched {
namespace {

Status nop(const TaskContext&) { return ok_status(); }

Rates unit_rates() {
  Rates r;
  for (double& x : r.per_second) x = 1.0;  // one unit of work per second
  return r;
}

TaskId task(Plan& p, Lane lane, double seconds, std::vector<TaskId> deps = {},
            Work w = Work::kFlops) {
  const TaskId t = p.add("t" + std::to_string(p.num_tasks()), lane, nop, std::move(deps));
  p.add_work(t, w, seconds);
  return t;
}

double step(Plan& p, const Rates& r) {
  EXPECT_TRUE(p.finalize().ok());
  auto pred = simulate(p, r);
  EXPECT_TRUE(pred.ok()) << pred.status().message();
  return pred.ok() ? pred->step_s : -1.0;
}

TEST(CostModel, InOrderLaneAddsUp) {
  Plan p;
  task(p, Lane::kCompute, 1.0);
  task(p, Lane::kCompute, 0.5);
  EXPECT_DOUBLE_EQ(step(p, unit_rates()), 1.5);
}

TEST(CostModel, IndependentLanesOverlap) {
  Plan p;
  task(p, Lane::kCompute, 1.0);
  task(p, Lane::kH2D, 2.0, {}, Work::kH2DBytes);
  ASSERT_TRUE(p.finalize().ok());
  auto pred = simulate(p, unit_rates());
  ASSERT_TRUE(pred.ok());
  EXPECT_DOUBLE_EQ(pred->step_s, 2.0);
  EXPECT_DOUBLE_EQ(pred->busy_s[int(Lane::kCompute)], 1.0);
  EXPECT_DOUBLE_EQ(pred->busy_s[int(Lane::kH2D)], 2.0);
  EXPECT_DOUBLE_EQ(pred->work[int(Work::kH2DBytes)], 2.0);
  EXPECT_DOUBLE_EQ(pred->exposed_s, 0.0);
}

TEST(CostModel, DependencyOnTransferIsExposed) {
  Plan p;
  const TaskId up = task(p, Lane::kH2D, 1.0, {}, Work::kH2DBytes);
  task(p, Lane::kCompute, 1.0, {up});
  ASSERT_TRUE(p.finalize().ok());
  auto pred = simulate(p, unit_rates());
  ASSERT_TRUE(pred.ok());
  EXPECT_DOUBLE_EQ(pred->step_s, 2.0);
  EXPECT_DOUBLE_EQ(pred->exposed_s, 1.0);
}

TEST(CostModel, RatesDivideWork) {
  Plan p;
  const TaskId t = p.add("mixed", Lane::kNvme, nop);
  p.add_work(t, Work::kNvmeReadBytes, 3e9);
  p.add_work(t, Work::kHostBytes, 1e9);
  Rates r = unit_rates();
  r.per_second[int(Work::kNvmeReadBytes)] = 1.5e9;
  r.per_second[int(Work::kHostBytes)] = 4e9;
  r.task_overhead_s = 0.125;
  EXPECT_DOUBLE_EQ(step(p, r), 2.0 + 0.25 + 0.125);
}

TEST(CostModel, LaneCapacity) {
  for (int workers : {1, 2, 4}) {
    Plan p;
    for (int i = 0; i < 4; ++i) task(p, Lane::kNvme, 1.0, {}, Work::kNvmeWriteBytes);
    Rates r = unit_rates();
    r.nvme_workers = workers;
    EXPECT_DOUBLE_EQ(step(p, r), 4.0 / workers) << workers;
  }
  Plan c;  // comm runs one at a time whatever the workers
  for (int i = 0; i < 3; ++i) task(c, Lane::kComm, 1.0, {}, Work::kNetBytes);
  EXPECT_DOUBLE_EQ(step(c, unit_rates()), 3.0);
}

TEST(CostModel, SharedCoresSerializeAllButTheDisk) {
  for (bool shared : {false, true}) {
    Plan p;
    task(p, Lane::kCompute, 1.0);
    task(p, Lane::kCpu, 1.0, {}, Work::kAdamElements);
    task(p, Lane::kH2D, 0.5, {}, Work::kH2DBytes);
    task(p, Lane::kNvme, 2.5, {}, Work::kNvmeReadBytes);  // waits on the disk: overlaps either way
    Rates r = unit_rates();
    r.shared_cores = shared;
    EXPECT_DOUBLE_EQ(step(p, r), 2.5) << shared;
    Plan q;
    task(q, Lane::kCompute, 1.0);
    task(q, Lane::kCpu, 1.0, {}, Work::kAdamElements);
    task(q, Lane::kH2D, 0.5, {}, Work::kH2DBytes);
    EXPECT_DOUBLE_EQ(step(q, r), shared ? 2.5 : 1.0) << shared;
  }
}

// A shared disk serves the nvme lane's requests together, each at 1/k of its pace while k run:
// three reads of 1 s issued at once all end at 3 s (one after the other they would end at 1, 2
// and 3 s), so the op waiting on the first starts at 3 s; unequal reads of 1 and 3 s end at 2
// and 4 s; two workers for three reads: two end at 2 s, the third runs alone to 3 s.
TEST(CostModel, SharedDiskServesItsRequestsTogether) {
  auto reads_then_ops = [](std::vector<double> reads, bool shared, int workers,
                           bool drains = false) {
    Plan p;
    for (double s : reads)
      task(p, Lane::kCompute, 1.0, {task(p, Lane::kNvme, s, {}, Work::kNvmeReadBytes)});
    Rates r = unit_rates();
    r.shared_disk = shared;
    r.disk_drains = drains;
    r.nvme_workers = workers;
    EXPECT_TRUE(p.finalize().ok());
    auto pred = simulate(p, r);
    EXPECT_TRUE(pred.ok());
    return pred.ok() ? *pred : Prediction{};
  };
  const Prediction together = reads_then_ops({1.0, 1.0, 1.0}, true, 4);
  EXPECT_DOUBLE_EQ(together.step_s, 6.0);  // reads to 3 s, then three ops of 1 s
  EXPECT_DOUBLE_EQ(together.busy_s[int(Lane::kNvme)], 3.0);
  EXPECT_DOUBLE_EQ(together.exposed_s, 3.0);
  EXPECT_DOUBLE_EQ(reads_then_ops({1.0, 1.0, 1.0}, false, 1).step_s, 4.0);  // 1, 2, 3 s
  EXPECT_DOUBLE_EQ(reads_then_ops({1.0, 3.0}, true, 4).step_s, 5.0);        // reads end at 2, 4 s
  EXPECT_DOUBLE_EQ(reads_then_ops({1.0, 1.0, 1.0}, true, 2).step_s, 5.0);   // 2, 2, 3 s
  // A draining disk: reads of 1 and 3 s both end at 4 s (the ops then to 6); two workers for
  // three reads of 1 s: two end at 2 s, the third at 3.
  EXPECT_DOUBLE_EQ(reads_then_ops({1.0, 3.0}, true, 4, true).step_s, 6.0);
  EXPECT_DOUBLE_EQ(reads_then_ops({1.0, 1.0, 1.0}, true, 2, true).step_s, 5.0);
  {
    // A read of 2 s at 0 and one of 0.5 s issued at 1 s (after an op): sharing the disk, the
    // second ends at 2 s and the first at 2.5; draining, both at 2.5 (1 s + 1.5 s of work left),
    // so the op after the second ends at 3.5, not 3.
    for (bool drains : {false, true}) {
      Plan p;
      task(p, Lane::kNvme, 2.0, {}, Work::kNvmeReadBytes);
      const TaskId first = task(p, Lane::kCompute, 1.0);
      task(p, Lane::kCompute, 1.0, {task(p, Lane::kNvme, 0.5, {first}, Work::kNvmeReadBytes)});
      Rates r = unit_rates();
      r.shared_disk = true;
      r.disk_drains = drains;
      EXPECT_DOUBLE_EQ(step(p, r), drains ? 3.5 : 3.0) << drains;
    }
  }

  // A task's dispatch is not the disk's: with 1 s of it per task, three reads of 1 s are
  // dispatched side by side to 1 s and then share the disk to 4 s (not 6); an inactive task,
  // all dispatch, does not slow an active read beside it (0.5 s, then 1 s alone on the disk).
  Plan p;
  for (int i = 0; i < 3; ++i) task(p, Lane::kNvme, 1.0, {}, Work::kNvmeReadBytes);
  Rates r = unit_rates();
  r.shared_disk = true;
  r.task_overhead_s = 1.0;
  EXPECT_DOUBLE_EQ(step(p, r), 4.0);
  Plan q;
  task(q, Lane::kNvme, 1.0, {}, Work::kNvmeReadBytes);
  task(q, Lane::kNvme, 1.0, {}, Work::kNvmeReadBytes);
  ASSERT_TRUE(q.finalize().ok());
  r.task_overhead_s = 0.5;
  const std::vector<bool> first_only = {true, false};
  auto pred = simulate(q, r, &first_only);
  ASSERT_TRUE(pred.ok());
  EXPECT_DOUBLE_EQ(pred->step_s, 1.5);
}

// With shared cores an nvme task's request takes the cores' CPU (0.25 s a request, 0.5 s a byte:
// 0.75 s for a read of one byte, whose disk time is 1 s for the byte and 1 s for the request):
// a compute task running when it starts ends so much later; started while the cores are idle,
// it is done in their idle time, and what is left of it delays the next task of the cores.
TEST(CostModel, DiskRequestsTakeTheSharedCoresCpu) {
  Rates r = unit_rates();
  r.shared_cores = true;
  r.nvme_cpu_op_s = 0.25;
  r.nvme_cpu_byte_s = 0.5;
  auto read = [](Plan& p, std::vector<TaskId> deps = {}) {
    const TaskId t = task(p, Lane::kNvme, 1.0, std::move(deps), Work::kNvmeReadBytes);
    p.add_work(t, Work::kNvmeOps, 1.0);
    return t;
  };
  {
    Plan p;  // a 2 s op beside two reads of 2 s: 2 + 2 x 0.75
    task(p, Lane::kCompute, 2.0);
    read(p);
    read(p);
    EXPECT_DOUBLE_EQ(step(p, r), 3.5);
    Rates own = r;
    own.shared_cores = false;  // a device of its own: the reads run beside it
    EXPECT_DOUBLE_EQ(step(p, own), 2.0);
    const std::vector<bool> op_only = {true, false, false};
    auto inactive = simulate(p, r, &op_only);
    ASSERT_TRUE(inactive.ok());
    EXPECT_DOUBLE_EQ(inactive->step_s, 2.0);
  }
  {
    Plan p;  // a read, then the op that waits for it: its CPU done while the cores idle
    task(p, Lane::kCompute, 1.0, {read(p)});
    EXPECT_DOUBLE_EQ(step(p, r), 3.0);
  }
  {
    Plan p;  // a read started with an op on the cores after a first one: charged to it
    const TaskId a = task(p, Lane::kCompute, 1.0);
    read(p, {a});
    task(p, Lane::kCompute, 2.0, {a});
    EXPECT_DOUBLE_EQ(step(p, r), 3.75);
  }
  {
    // A write of 0.5 s (0.25 s of CPU) and a read (0.75 s) start on idle cores: the op after the
    // write starts at 0.5 s with 0.5 s of their CPU left, and ends at 0.5 + 0.5 + 2.
    Plan p;
    const TaskId h = task(p, Lane::kNvme, 0.5, {}, Work::kNvmeWriteBytes);
    read(p);
    task(p, Lane::kCompute, 2.0, {h});
    EXPECT_DOUBLE_EQ(step(p, r), 3.0);
    // A write of 2 s (1 s of CPU) before the op: done in the idle time, the op ends at 2 + 1.
    Plan q;
    task(q, Lane::kCompute, 1.0, {task(q, Lane::kNvme, 2.0, {}, Work::kNvmeWriteBytes)});
    EXPECT_DOUBLE_EQ(step(q, r), 3.0);
  }
  {
    // A request of 0.5 s (0.5 s of CPU) between two ops: done in the idle time but for a
    // rounding's worth (0.5 - (0.7 - 0.2)), which leaves the op after it where it was; that op
    // ends once, and the one after it then runs to 2.7 s.
    Rates o = unit_rates();
    o.shared_cores = true;
    o.nvme_cpu_op_s = 1.0;
    Plan p;
    const TaskId a = task(p, Lane::kCompute, 0.2);
    const TaskId q = task(p, Lane::kNvme, 0.5, {a}, Work::kNvmeOps);
    task(p, Lane::kCompute, 1.0, {task(p, Lane::kCompute, 1.0, {q})});
    EXPECT_DOUBLE_EQ(step(p, o), 2.7);
  }
}

// A hand-off is charged to the first compute task that depends on a transfer, once per transfer:
// K ops after one upload (a layer's micro-batches in layer-major order) pay it once, K ops each
// after its own upload K times; an op after a cpu-lane task, or inactive tasks, not at all.
TEST(CostModel, HandOffChargedOnceWhereComputeFirstWaitsOnATransfer) {
  Rates r = unit_rates();
  r.handoff_s = 0.25;
  for (int k : {1, 2, 4}) {
    Plan shared;  // one upload, then k ops that all depend on it
    const TaskId up = task(shared, Lane::kH2D, 1.0, {}, Work::kH2DBytes);
    for (int i = 0; i < k; ++i) task(shared, Lane::kCompute, 1.0, {up});
    EXPECT_DOUBLE_EQ(step(shared, r), 1.0 + k + 0.25) << k;
    Plan own;  // an upload before each op: the ops wait on each in turn
    for (int i = 0; i < k; ++i) {
      const TaskId u = task(own, Lane::kH2D, 0.5, {}, Work::kH2DBytes);
      task(own, Lane::kCompute, 1.0, {u});
    }
    EXPECT_DOUBLE_EQ(step(own, r), 0.5 + k * 1.25) << k;
  }
  Plan host;  // a cpu-lane predecessor is not a transfer
  const TaskId c = task(host, Lane::kCpu, 1.0, {}, Work::kAdamElements);
  task(host, Lane::kCompute, 1.0, {c});
  EXPECT_DOUBLE_EQ(step(host, r), 2.0);
  Plan off;  // a gather, then the op; either inactive
  const TaskId u = task(off, Lane::kComm, 1.0, {}, Work::kNetBytes);
  const TaskId op = task(off, Lane::kCompute, 1.0, {u});
  ASSERT_TRUE(off.finalize().ok());
  for (int which = 0; which < 2; ++which) {
    std::vector<bool> active(2, true);
    active[size_t(which == 0 ? u : op)] = false;
    auto pred = simulate(off, r, &active);
    ASSERT_TRUE(pred.ok());
    EXPECT_DOUBLE_EQ(pred->step_s, 1.0) << which;  // the active task alone, no hand-off
  }
  auto all = simulate(off, r);
  ASSERT_TRUE(all.ok());
  EXPECT_DOUBLE_EQ(all->step_s, 2.25);
}

TEST(CostModel, MissingRateNamesTheKindAndTask) {
  Plan p;
  task(p, Lane::kCpu, 1.0, {}, Work::kAdamElements);
  ASSERT_TRUE(p.finalize().ok());
  Rates r = unit_rates();
  r.per_second[int(Work::kAdamElements)] = 0.0;
  auto pred = simulate(p, r);
  ASSERT_FALSE(pred.ok());
  EXPECT_NE(pred.status().message().find("adam elements"), std::string::npos);
  EXPECT_NE(pred.status().message().find("'t0'"), std::string::npos);
  Plan unfinalized;
  task(unfinalized, Lane::kCpu, 1.0);
  EXPECT_FALSE(simulate(unfinalized, unit_rates()).ok());
}

// Random plans: longest chain <= step <= sum of durations, with the chain computed here over
// every predecessor relation of the finalized plan.
TEST(CostModel, RandomPlansLieBetweenChainAndSum) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    Plan p;
    const int n = 5 + int(rng() % 40);
    std::vector<double> dur;
    int requests = 0;
    for (int i = 0; i < n; ++i) {
      std::vector<TaskId> deps;
      for (int j = 0; j < i; ++j) {
        if (rng() % 6 == 0) deps.push_back(j);
      }
      double d = 0.1 + double(rng() % 100) / 10.0;
      const auto lane = static_cast<Lane>(rng() % kNumLanes);
      const TaskId t = task(p, lane, d, deps);
      if (lane == Lane::kNvme) {  // a request: its CPU on shared cores below
        p.add_work(t, Work::kNvmeOps, 0.5);
        d += 0.5;
        ++requests;
      }
      dur.push_back(d);
    }
    ASSERT_TRUE(p.finalize().ok());
    std::vector<double> finish(size_t(n), 0.0);
    double chain = 0.0, sum = 0.0;
    for (TaskId t : p.order()) {
      double start = 0.0;
      p.for_each_predecessor(t, [&](TaskId q) { start = std::max(start, finish[size_t(q)]); });
      finish[size_t(t)] = start + dur[size_t(t)];
      chain = std::max(chain, finish[size_t(t)]);
      sum += dur[size_t(t)];
    }
    // A shared disk does its requests' work all the same; on shared cores their CPU (0.3 s a
    // request) is work of the cores' on top.
    for (int v = 0; v < 6; ++v) {
      const bool disk = v % 2 == 1 || v >= 4, cores = v / 2 == 1, drains = v >= 4;
      Rates r = unit_rates();
      r.shared_disk = disk;
      r.disk_drains = drains;
      r.shared_cores = cores;
      r.nvme_cpu_op_s = 0.3;
      auto pred = simulate(p, r);
      ASSERT_TRUE(pred.ok());
      EXPECT_GE(pred->step_s, chain - 1e-9) << trial << " " << v;
      EXPECT_LE(pred->step_s, sum + (cores ? 0.3 * 0.5 * requests : 0.0) + 1e-9)
          << trial << " " << v;
    }
  }
}

}  // namespace
}  // namespace strata::sched
