// Executor on the CpuDevice (whose streams are real threads, so a missing dependency shows up
// as wrong data or a thread-sanitizer report): results checked by data against values computed
// here, replay, the budget honoured at run time, the trace as JSON, and failure (an injected
// I/O error of the swap store, a failing task) that stops the step with nothing left running.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cpu_device.h"
#include "gpu/cpu_stream.h"
#include "gpu/kernels.h"
#include "nvme/swap_store.h"
#include "scheduler/executor.h"
#include "scheduler/trace.h"
#include "scratch_dir.h"

namespace strata::sched {
namespace {

constexpr int64_t kNumel = 1 << 15;  // floats per chain buffer
constexpr uint64_t kBytes = kNumel * sizeof(float);

std::unique_ptr<gpu::Device> cpu_device(double link_bytes_per_s = 2e9) {
  gpu::DeviceOptions o;
  o.memory_limit_bytes = 64 << 20;
  o.link_bytes_per_s = link_bytes_per_s;
  o.threads = 1;
  auto d = gpu::create_cpu_device(o);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return std::move(d).value();
}

float input_value(int64_t step, int chain, int64_t j) {
  return static_cast<float>(step * 1000 + chain * 10) + static_cast<float>(j % 7);
}

// `chains` independent pipelines: cpu fill -> h2d -> compute x2 -> compute +1 (a device constant
// uploaded first) -> d2h -> cpu check, with the device buffers acquired by the upload and
// released by the download under a device budget of `resident` chain buffers plus the constant.
// out[step][chain] = sum of the chain's results, written by a final cpu task. `twice_lane`: where
// the doubling runs (compute, or the link lane: a stream of its own between h2d and compute).
struct ChainPlan {
  Plan plan;
  std::vector<double> sums;
  std::atomic<int> mismatches{0};
};

std::unique_ptr<ChainPlan> chain_plan(gpu::Device& dev, int chains, int resident,
                                      Lane twice_lane = Lane::kCompute) {
  auto cp = std::make_unique<ChainPlan>();
  Plan& p = cp->plan;
  cp->sums.assign(static_cast<size_t>(chains), 0.0);
  gpu::Kernels& k = dev.kernels();
  const BufferId ones_host = p.add_buffer("ones host", Tier::kPinnedHost, kBytes);
  const BufferId ones = p.add_buffer("ones", Tier::kDevice, kBytes);
  const TaskId fill_ones = p.add("fill ones", Lane::kCpu, [=](const TaskContext& c) {
    auto* o = static_cast<float*>(c.buffer(ones_host));
    for (int64_t j = 0; j < kNumel; ++j) o[j] = 1.0f;
    return ok_status();
  });
  p.writes(fill_ones, ones_host);
  const TaskId up_ones = p.add("up ones", Lane::kH2D,
                               [=](const TaskContext& c) {
                                 return c.stream->copy(c.buffer(ones), c.buffer(ones_host), kBytes,
                                                       gpu::CopyKind::kHostToDevice);
                               },
                               {fill_ones});
  p.reads(up_ones, ones_host);
  p.writes(up_ones, ones);
  std::vector<TaskId> checks;
  for (int i = 0; i < chains; ++i) {
    const std::string s = std::to_string(i);
    const BufferId in = p.add_buffer("in" + s, Tier::kPinnedHost, kBytes);
    const BufferId dv = p.add_buffer("dev" + s, Tier::kDevice, kBytes);
    const BufferId out = p.add_buffer("out" + s, Tier::kPinnedHost, kBytes);
    const TaskId fill = p.add("fill" + s, Lane::kCpu, [=](const TaskContext& c) {
      auto* x = static_cast<float*>(c.buffer(in));
      for (int64_t j = 0; j < kNumel; ++j) x[j] = input_value(c.step, i, j);
      return ok_status();
    });
    p.writes(fill, in);
    const TaskId up = p.add("up" + s, Lane::kH2D,
                            [=](const TaskContext& c) {
                              return c.stream->copy(c.buffer(dv), c.buffer(in), kBytes,
                                                    gpu::CopyKind::kHostToDevice);
                            },
                            {fill});
    p.acquire(up, dv);
    p.reads(up, in);
    p.writes(up, dv);
    const TaskId twice = p.add("twice" + s, twice_lane,
                               [=, &k](const TaskContext& c) {
                                 return k.scale(*c.stream, c.buffer(dv), 2.0f, kNumel, DType::kF32);
                               },
                               {up});
    p.reads(twice, dv);
    p.writes(twice, dv);
    const TaskId plus = p.add("plus" + s, Lane::kCompute,
                              [=, &k](const TaskContext& c) {
                                return k.add(*c.stream, c.buffer(dv), c.buffer(dv), c.buffer(ones),
                                             kNumel, DType::kF32);
                              },
                              {twice, up_ones});
    p.reads(plus, dv);
    p.reads(plus, ones);
    p.writes(plus, dv);
    const TaskId down = p.add("down" + s, Lane::kD2H,
                              [=](const TaskContext& c) {
                                return c.stream->copy(c.buffer(out), c.buffer(dv), kBytes,
                                                      gpu::CopyKind::kDeviceToHost);
                              },
                              {plus});
    p.reads(down, dv);
    p.writes(down, out);
    p.release(down, dv);
    ChainPlan* raw = cp.get();
    const TaskId check = p.add("check" + s, Lane::kCpu,
                               [=](const TaskContext& c) {
                                 const auto* y = static_cast<const float*>(c.buffer(out));
                                 double sum = 0.0;
                                 for (int64_t j = 0; j < kNumel; ++j) {
                                   if (y[j] != 2.0f * input_value(c.step, i, j) + 1.0f)
                                     raw->mismatches.fetch_add(1);
                                   sum += y[j];
                                 }
                                 raw->sums[static_cast<size_t>(i)] = sum;
                                 return ok_status();
                               },
                               {down});
    p.reads(check, out);
    checks.push_back(check);
  }
  Budgets b;
  b.bytes[static_cast<int>(Tier::kDevice)] = kBytes * static_cast<uint64_t>(resident + 1);
  const Status st = p.finalize(b);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return cp;
}

double expected_sum(int64_t step, int chain) {
  double sum = 0.0;
  for (int64_t j = 0; j < kNumel; ++j) sum += 2.0f * input_value(step, chain, j) + 1.0f;
  return sum;
}

TEST(Executor, DependenciesAreRespectedByData) {
  auto dev = cpu_device();
  auto cp = chain_plan(*dev, 8, 3);
  EXPECT_EQ(cp->plan.peak_bytes(Tier::kDevice), 4 * kBytes);  // 3 chains + the constant
  std::vector<double>* sums = &cp->sums;
  std::atomic<int>* mismatches = &cp->mismatches;
  auto ex_r = Executor::create(*dev, std::move(cp->plan));
  ASSERT_TRUE(ex_r.ok()) << ex_r.status().to_string();
  Executor& ex = *ex_r.value();
  for (int step = 1; step <= 6; ++step) {
    const Status st = ex.replay();
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(mismatches->load(), 0) << "step " << step;
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ((*sums)[size_t(i)], expected_sum(step, i)) << "step " << step << " chain " << i;
    }
  }
  EXPECT_EQ(ex.steps(), 6);
  // The device budget held at run time: at most 3 chain buffers between upload and download.
  const Plan& plan = ex.plan();
  const StepTrace& tr = ex.last_trace();
  std::vector<std::pair<int64_t, int>> edges;  // (+1 at an upload's start, -1 at a download's end)
  for (size_t t = 0; t < plan.num_tasks(); ++t) {
    const std::string& name = plan.task(TaskId(t)).name;
    if (name.rfind("up", 0) == 0 && name != "up ones") edges.emplace_back(tr.spans[t].start_ns, +1);
    if (name.rfind("down", 0) == 0) edges.emplace_back(tr.spans[t].end_ns, -1);
  }
  std::sort(edges.begin(), edges.end());
  int live = 0, most = 0;
  for (const auto& e : edges) {
    live += e.second;
    most = std::max(most, live);
  }
  EXPECT_LE(most, 3);
  EXPECT_GE(most, 1);
}

// The link lane (where NCCL's collectives go) is a stream lane like the copy lanes: its tasks
// run on a stream of their own, after the upload and before the compute that reads their
// result, ordered by events (no host task in between), and the data say so.
TEST(Executor, TheLinkLaneIsAStreamOrderedByEvents) {
  auto dev = cpu_device();
  auto cp = chain_plan(*dev, 6, 3, Lane::kLink);
  std::vector<double>* sums = &cp->sums;
  std::atomic<int>* mismatches = &cp->mismatches;
  EXPECT_EQ(cp->plan.lane_tasks(Lane::kLink).size(), 6u);
  auto ex_r = Executor::create(*dev, std::move(cp->plan));
  ASSERT_TRUE(ex_r.ok()) << ex_r.status().to_string();
  Executor& ex = *ex_r.value();
  for (int step = 1; step <= 4; ++step) {
    const Status st = ex.replay();
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(mismatches->load(), 0) << "step " << step;
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ((*sums)[size_t(i)], expected_sum(step, i)) << "step " << step << " chain " << i;
    }
  }
  const StepMetrics m = compute_metrics(ex.plan(), ex.last_trace());
  EXPECT_GT(m.busy_ms[static_cast<int>(Lane::kLink)], 0.0);
  // A plan without link tasks has no link stream.
  auto plain = chain_plan(*dev, 1, 1);
  auto ex2 = Executor::create(*dev, std::move(plain->plan));
  ASSERT_TRUE(ex2.ok()) << ex2.status().to_string();
  EXPECT_TRUE(ex2.value()->replay().ok());
}

TEST(Executor, ReplayGivesIdenticalResultsToAFreshExecutor) {
  auto dev = cpu_device(0.0);
  std::vector<double> first, second;
  for (int run = 0; run < 2; ++run) {
    auto cp = chain_plan(*dev, 5, 2);
    std::vector<double>* sums = &cp->sums;
    auto ex = Executor::create(*dev, std::move(cp->plan));
    ASSERT_TRUE(ex.ok());
    for (int step = 1; step <= (run == 0 ? 3 : 1); ++step) ASSERT_TRUE(ex.value()->replay().ok());
    // Run 0 ends on step 3; run 1 replays step 1 only: compare step 1 of run 1 with expectations
    // and step 3 of run 0 with its own expectations.
    (run == 0 ? first : second) = *sums;
    EXPECT_EQ(cp->mismatches.load(), 0);
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(first[size_t(i)], expected_sum(3, i));
    EXPECT_EQ(second[size_t(i)], expected_sum(1, i));
  }
}

// Host callbacks enqueued so far on the executor's streams (CpuStream counts them).
int callbacks(Executor& ex) {
  uint64_t n = 0;
  for (Lane l : {Lane::kCompute, Lane::kH2D, Lane::kD2H}) {
    n += dynamic_cast<gpu::CpuStream&>(ex.stream(l)).host_callbacks();
  }
  return static_cast<int>(n);
}

// Untraced steps cost a stream callback only where a host task waits for a stream task; traced
// ones two for every stream task. The results are the same either way.
TEST(Executor, OnlyTracedStepsPayTheTraceCallbacks) {
  auto dev = cpu_device(0.0);
  auto cp = chain_plan(*dev, 4, 2);
  int stream_tasks = 0, waited_for = 0;
  const Plan& plan = cp->plan;
  std::vector<uint8_t> waited(plan.num_tasks(), 0);
  for (size_t i = 0; i < plan.num_tasks(); ++i) {
    const bool host = !is_stream_lane(plan.task(TaskId(i)).lane);
    stream_tasks += host ? 0 : 1;
    plan.for_each_predecessor(TaskId(i), [&](TaskId p) {
      if (host && is_stream_lane(plan.task(p).lane)) waited[static_cast<size_t>(p)] = 1;
    });
  }
  for (uint8_t w : waited) waited_for += w;
  ASSERT_GT(waited_for, 0);
  ASSERT_GT(stream_tasks, waited_for);
  ExecutorOptions eo;
  eo.trace = false;
  std::vector<double>* sums = &cp->sums;
  auto ex = Executor::create(*dev, std::move(cp->plan), eo);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  ASSERT_TRUE(ex.value()->replay().ok());
  EXPECT_EQ(callbacks(*ex.value()), waited_for);
  ex.value()->set_trace(true);
  ASSERT_TRUE(ex.value()->replay().ok());
  EXPECT_EQ(callbacks(*ex.value()), waited_for + 2 * stream_tasks);
  for (size_t i = 0; i < ex.value()->plan().num_tasks(); ++i) {
    EXPECT_GT(ex.value()->last_trace().spans[i].end_ns, 0)
        << ex.value()->plan().task(TaskId(i)).name;
  }
  ex.value()->set_trace(false);
  ASSERT_TRUE(ex.value()->replay().ok());
  EXPECT_EQ(callbacks(*ex.value()), 2 * waited_for + 2 * stream_tasks);
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*sums)[size_t(i)], expected_sum(3, i));
  EXPECT_EQ(cp->mismatches.load(), 0);
}

TEST(Executor, TraceIsJsonAndInOrderLanesNeverOverlap) {
  auto dev = cpu_device();
  auto cp = chain_plan(*dev, 6, 2);
  auto ex = Executor::create(*dev, std::move(cp->plan));
  ASSERT_TRUE(ex.ok());
  TraceWriter writer;
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(ex.value()->replay().ok());
    writer.add_step(ex.value()->plan(), ex.value()->last_trace());
  }
  const StepMetrics m = compute_metrics(ex.value()->plan(), ex.value()->last_trace());
  EXPECT_GT(m.busy_ms[static_cast<int>(Lane::kCompute)], 0.0);
  EXPECT_GT(m.busy_ms[static_cast<int>(Lane::kH2D)], 0.0);
  EXPECT_GT(m.critical_path_tasks, 0);
  EXPECT_LE(m.busy_ms[static_cast<int>(Lane::kCompute)], m.step_ms);
  const auto doc = nlohmann::json::parse(writer.json());
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<int, std::vector<std::pair<double, double>>> by_track;
  std::map<int, std::string> names;
  size_t complete = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    ++complete;
    by_track[e["tid"]].emplace_back(e["ts"].get<double>(), e["dur"].get<double>());
  }
  EXPECT_EQ(complete, 2 * ex.value()->plan().num_tasks());
  for (auto& [tid, spans] : by_track) {
    const std::string name = names[tid];
    if (name != "compute" && name != "h2d" && name != "d2h" && name != "link" && name != "comm") {
      continue;
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      EXPECT_LE(spans[i - 1].first + spans[i - 1].second, spans[i].first + 1e-3)
          << name << " span " << i;
    }
  }
}

// Several writers' events joined (train_gpt under mpirun: a process per rank): each process
// named, its tracks and spans under its own pid, nothing lost; a part that is not an array is
// refused.
TEST(Executor, TracesJoinAsOneProcessEach) {
  auto dev = cpu_device();
  auto cp = chain_plan(*dev, 4, 2);
  auto ex = Executor::create(*dev, std::move(cp->plan));
  ASSERT_TRUE(ex.ok());
  TraceWriter w;
  ASSERT_TRUE(ex.value()->replay().ok());
  w.add_step(ex.value()->plan(), ex.value()->last_trace());
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.path() + "/joined.json";
  ASSERT_TRUE(
      TraceWriter::write_joined(path, {w.events_json(1, "rank 0"), w.events_json(2, "rank 1")})
          .ok());
  std::ifstream in(path);
  const auto doc = nlohmann::json::parse(in);
  std::map<int, std::string> process;
  std::map<int, size_t> spans;
  for (const auto& e : doc["traceEvents"]) {
    if (e["name"] == "process_name") process[e["pid"]] = e["args"]["name"];
    if (e["ph"] == "X") ++spans[e["pid"]];
  }
  EXPECT_EQ(process, (std::map<int, std::string>{{1, "rank 0"}, {2, "rank 1"}}));
  EXPECT_EQ(spans[1], w.num_events());
  EXPECT_EQ(spans[2], w.num_events());
  EXPECT_FALSE(TraceWriter::write_joined(path, {"{}"}).ok());
}

// A step whose nvme read fails (injected EIO) while a slow cpu task is in flight.
TEST(Executor, AFailingTaskStopsTheStepAndLeavesNothingRunning) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  nvme::SwapStoreOptions so;
  so.dirs = {dir.path()};
  so.capacity_bytes = 16 << 20;
  so.block_bytes = 64 << 10;
  auto store_r = nvme::SwapStore::open(so);
  if (!store_r.ok() && store_r.status().code() == ErrorCode::kUnsupported) {
    GTEST_SKIP() << store_r.status().to_string();
  }
  ASSERT_TRUE(store_r.ok()) << store_r.status().to_string();
  nvme::SwapStore& store = *store_r.value();
  auto dev = cpu_device();
  {
    Plan p;
    const BufferId host = p.add_buffer("state", Tier::kPinnedHost, 1 << 20);
    const BufferId dv = p.add_buffer("dev", Tier::kDevice, 1 << 20);
    std::atomic<bool> slow_started{false}, slow_done{false};
    const TaskId write = p.add("write", Lane::kNvme, [&](const TaskContext& c) {
      std::memset(c.buffer(host), 7, 1 << 20);
      return store.write(1, c.buffer(host), 1 << 20).wait();
    });
    p.writes(write, host);
    const TaskId slow = p.add("slow", Lane::kCpu, [&](const TaskContext&) {
      slow_started = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      slow_done = true;
      return ok_status();
    });
    const TaskId read = p.add("read", Lane::kNvme,
                              [&](const TaskContext& c) {
                                // The failure comes while 'slow' is in flight (on a loaded machine
                                // the cpu lane could otherwise not have started it yet, and a step
                                // that failed starts nothing).
                                while (!slow_started.load()) std::this_thread::yield();
                                return store.read(1, c.buffer(host), 1 << 20).wait();
                              },
                              {write});
    p.writes(read, host);
    const TaskId up = p.add("up", Lane::kH2D,
                            [&](const TaskContext& c) {
                              return c.stream->copy(c.buffer(dv), c.buffer(host), 1 << 20,
                                                    gpu::CopyKind::kHostToDevice);
                            },
                            {read});
    p.reads(up, host);
    p.writes(up, dv);
    const TaskId after =
        p.add("after", Lane::kCpu, [](const TaskContext&) { return ok_status(); }, {up, slow});
    ASSERT_TRUE(p.finalize().ok());
    auto ex_r = Executor::create(*dev, std::move(p));
    ASSERT_TRUE(ex_r.ok());
    Executor& ex = *ex_r.value();
    ASSERT_TRUE(ex.replay().ok());  // a good step first
    slow_started = false;
    slow_done = false;
    store.set_fault_injection(
        nvme::FaultInjection{16 + 3, nvme::FaultKind::kEio});  // 16 blocks written, then the read
    const Status st = ex.replay();
    ASSERT_EQ(st.code(), ErrorCode::kIo) << st.to_string();
    EXPECT_NE(st.message().find("'read'"), std::string::npos) << st.message();
    EXPECT_TRUE(slow_done.load());  // the task in flight finished before replay returned
    const StepTrace& tr = ex.last_trace();
    EXPECT_EQ(tr.spans[size_t(up)].end_ns, -1);  // nothing after the failure ran
    EXPECT_EQ(tr.spans[size_t(after)].end_ns, -1);
    store.set_fault_injection(nvme::FaultInjection{});
    // The next call reports the same error at once instead of hanging or running on.
    const auto t0 = std::chrono::steady_clock::now();
    const Status again = ex.replay();
    EXPECT_EQ(again.code(), ErrorCode::kIo);
    EXPECT_EQ(again.message(), st.message());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
    EXPECT_EQ(ex.steps(), 2);
  }
  EXPECT_EQ(dev->memory_info().used_bytes, 0u);  // the executor gave its arena back
}

TEST(Executor, AFailingStreamTaskStopsTheStep) {
  auto dev = cpu_device(0.0);
  Plan p;
  std::atomic<int> ran{0};
  const TaskId ok1 = p.add("ok", Lane::kCompute, [&](const TaskContext&) {
    ++ran;
    return ok_status();
  });
  const TaskId bad = p.add(
      "bad", Lane::kH2D,
      [](const TaskContext&) { return make_error(ErrorCode::kOutOfMemory, "no room"); }, {ok1});
  p.add("never", Lane::kCpu,
        [&](const TaskContext&) {
          ++ran;
          return ok_status();
        },
        {bad});
  ASSERT_TRUE(p.finalize().ok());
  auto ex = Executor::create(*dev, std::move(p));
  ASSERT_TRUE(ex.ok());
  const Status st = ex.value()->replay();
  EXPECT_EQ(st.code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(st.message().find("'bad'"), std::string::npos) << st.message();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(ex.value()->replay().code(), ErrorCode::kOutOfMemory);
}

TEST(Executor, RefusesAPlanThatWasNotFinalized) {
  auto dev = cpu_device(0.0);
  Plan p;
  p.add("t", Lane::kCpu, [](const TaskContext&) { return ok_status(); });
  EXPECT_EQ(Executor::create(*dev, std::move(p)).status().code(), ErrorCode::kConfig);
}

}  // namespace
}  // namespace strata::sched
