// bench_scheduler: (1) a synthetic layer pipeline on the CpuDevice with the link-bandwidth model
// on: L layers, each a compute of time c (matmuls on one core) and a host-to-device load of time
// t, the load of the next layers running ahead under a device budget of `depth` + 1 layer
// buffers. For t/c = 0.5, 1, 2 it prints the measured step, the ideal max(L*c, L*t) + min(c, t)
// (pipeline fill), the serial sum L*(c + t) and the exposed-transfer share of the step (goal:
// < 5% when t <= c). (2) The dispatch overhead per task of a replay: independent empty tasks on
// the stream and host lanes, trace on and off. Prints a table, then one JSON line.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "gpu/cpu_device.h"
#include "gpu/kernels.h"
#include "scheduler/executor.h"

using namespace strata;
using bench::Clock;
using bench::median;
using bench::seconds_since;

namespace {

STRATA_BENCH_CHECKS("bench_scheduler")

struct Pipeline {
  int layers = 16;
  int depth = 2;      // layers loaded ahead of the one computing
  int64_t dim = 256;  // matmul size
  int reps = 1;       // matmuls per layer
  uint64_t bytes = 1 << 20;
};

// The compute of one layer: `reps` matmuls [dim x dim] x [dim x dim] in fp32 on `s`.
Status layer_compute(gpu::Kernels& k, gpu::Stream& s, void* a, void* b, void* c,
                     const Pipeline& p) {
  gpu::MatmulArgs mm;
  mm.a = a;
  mm.b = b;
  mm.c = c;
  mm.m = mm.n = mm.k = p.dim;
  for (int r = 0; r < p.reps; ++r) STRATA_RETURN_IF_ERROR(k.matmul(s, mm));
  return ok_status();
}

sched::Plan pipeline_plan(gpu::Device& dev, const Pipeline& p, bool with_loads, bool with_compute) {
  using namespace sched;
  Plan plan;
  gpu::Kernels& k = dev.kernels();
  const uint64_t mat = static_cast<uint64_t>(p.dim * p.dim) * 4;
  const BufferId ma = plan.add_buffer("a", Tier::kDevice, mat, true);
  const BufferId mb = plan.add_buffer("b", Tier::kDevice, mat, true);
  const BufferId mc = plan.add_buffer("c", Tier::kDevice, mat, true);
  const BufferId host = plan.add_buffer("host weights", Tier::kPinnedHost, p.bytes, true);
  TaskId prev = -1;
  for (int l = 0; l < p.layers; ++l) {
    const std::string s = std::to_string(l);
    const BufferId w = plan.add_buffer("layer" + s, Tier::kDevice, p.bytes);
    std::vector<TaskId> deps;
    TaskId load = -1;
    if (with_loads) {
      load = plan.add("load " + s, Lane::kH2D, [=](const TaskContext& c) {
        return c.stream->copy(c.buffer(w), c.buffer(host), p.bytes, gpu::CopyKind::kHostToDevice);
      });
      deps.push_back(load);
    } else {
      load = plan.add("acquire " + s, Lane::kH2D, [](const TaskContext&) { return ok_status(); });
      deps.push_back(load);
    }
    plan.acquire(load, w);
    plan.writes(load, w);
    if (prev >= 0) deps.push_back(prev);
    const TaskId comp = plan.add(
        "compute " + s, Lane::kCompute,
        [=, &k, &p](const TaskContext& c) {
          if (!with_compute) return ok_status();
          return layer_compute(k, *c.stream, c.buffer(ma), c.buffer(mb), c.buffer(mc), p);
        },
        deps);
    plan.reads(comp, w);
    plan.release(comp, w);
    prev = comp;
  }
  Budgets budgets;
  budgets.bytes[0] = 3 * ((static_cast<uint64_t>(p.dim * p.dim) * 4 + 255) / 256 * 256) +
                     static_cast<uint64_t>(p.depth + 1) * ((p.bytes + 255) / 256 * 256);
  check(plan.finalize(budgets));
  return plan;
}

// Median replay seconds (and the executor's last metrics) of `plan` over `repeats` after one
// warm-up.
struct Timed {
  double step_s = 0;
  double exposed_fraction = 0;
  sched::StepMetrics metrics;
};
Timed time_plan(gpu::Device& dev, sched::Plan plan, int repeats, bool trace = true) {
  sched::ExecutorOptions eo;
  eo.trace = trace;
  auto ex = check(sched::Executor::create(dev, std::move(plan), eo));
  check(ex->replay());
  std::vector<double> times, exposed;
  Timed out;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    check(ex->replay());
    times.push_back(seconds_since(t0));
    if (trace) {
      out.metrics = sched::compute_metrics(ex->plan(), ex->last_trace());
      exposed.push_back(out.metrics.exposed_transfer_ms / out.metrics.step_ms);
    }
  }
  out.step_s = median(times);
  out.exposed_fraction = median(exposed);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_scheduler: layer pipeline overlap and dispatch overhead on the CpuDevice"};
  bool quick = false;
  int repeats = 7;
  Pipeline p;
  p.layers = 32;
  double compute_ms = 4.0;
  app.add_flag("--quick", quick, "fewer layers and repeats");
  app.add_option("--layers", p.layers, "L")->check(CLI::Range(2, 4096))->capture_default_str();
  app.add_option("--depth", p.depth, "layers loaded ahead (the device budget holds depth + 1)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--compute-ms", compute_ms, "target compute time c per layer")
      ->check(CLI::Range(0.5, 1000.0))
      ->capture_default_str();
  app.add_option("--repeats", repeats, "timed replays per case (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    p.layers = std::min(p.layers, 24);
    repeats = std::min(repeats, 3);
  }

  // Calibrate c: matmuls per layer on a one-core CpuDevice.
  gpu::DeviceOptions calib_opts;
  calib_opts.threads = 1;
  calib_opts.memory_limit_bytes = 256 << 20;
  auto calib_dev = check(gpu::create_cpu_device(calib_opts));
  {
    Pipeline one = p;
    one.layers = 1;
    one.reps = 1;
    const double mm_s =
        time_plan(*calib_dev, pipeline_plan(*calib_dev, one, false, true), 5).step_s;
    p.reps = std::max(1, static_cast<int>(compute_ms * 1e-3 / mm_s + 0.5));
  }
  Pipeline measure_c = p;
  const double c_s =
      time_plan(*calib_dev, pipeline_plan(*calib_dev, measure_c, false, true), repeats).step_s /
      p.layers;
  calib_dev.reset();

  std::printf(
      "layer pipeline: L=%d, depth %d, c = %.2f ms (%d matmuls %lldx%lld), load %llu bytes\n",
      p.layers, p.depth, c_s * 1e3, p.reps, static_cast<long long>(p.dim),
      static_cast<long long>(p.dim), static_cast<unsigned long long>(p.bytes));
  std::printf("%6s %8s %8s %10s %10s %10s %9s %9s\n", "t/c", "t ms", "c ms", "step ms", "ideal ms",
              "serial ms", "vs ideal", "exposed");
  nlohmann::json exposed_by_ratio, step_by_ratio;
  for (double ratio : {0.5, 1.0, 2.0}) {
    gpu::DeviceOptions o;
    o.threads = 1;
    o.memory_limit_bytes = 256 << 20;
    o.link_bytes_per_s = static_cast<double>(p.bytes) / (ratio * c_s);
    auto dev = check(gpu::create_cpu_device(o));
    // t alone: the loads with no compute. A copy costs its link time plus the memcpy, so the
    // link rate is corrected once to make t = ratio * c.
    double t_s = time_plan(*dev, pipeline_plan(*dev, p, true, false), repeats).step_s / p.layers;
    const double copy_s = t_s - static_cast<double>(p.bytes) / o.link_bytes_per_s;
    if (ratio * c_s > 2 * copy_s) {
      o.link_bytes_per_s = static_cast<double>(p.bytes) / (ratio * c_s - copy_s);
      dev.reset();
      dev = check(gpu::create_cpu_device(o));
      t_s = time_plan(*dev, pipeline_plan(*dev, p, true, false), repeats).step_s / p.layers;
    }
    const Timed both = time_plan(*dev, pipeline_plan(*dev, p, true, true), repeats);
    const double ideal = std::max(p.layers * c_s, p.layers * t_s) + std::min(c_s, t_s);
    const double serial = p.layers * (c_s + t_s);
    char key[16];
    std::snprintf(key, sizeof key, "%g", ratio);
    exposed_by_ratio[key] = both.exposed_fraction;
    step_by_ratio[key] = both.step_s * 1e3;
    std::printf("%6g %8.2f %8.2f %10.2f %10.2f %10.2f %9.3f %8.1f%%\n", ratio, t_s * 1e3, c_s * 1e3,
                both.step_s * 1e3, ideal * 1e3, serial * 1e3, both.step_s / ideal,
                100.0 * both.exposed_fraction);
    if (ratio == 1.0) std::printf("  t/c=1: %s\n", both.metrics.describe().c_str());
  }

  // Dispatch overhead: independent empty tasks, half on the compute stream, half on the cpu lane.
  gpu::DeviceOptions o;
  o.threads = 1;
  auto dev = check(gpu::create_cpu_device(o));
  const int tasks = quick ? 2000 : 10000;
  auto empty_plan = [&](sched::Lane lane) {
    sched::Plan plan;
    for (int i = 0; i < tasks; ++i) {
      plan.add("t" + std::to_string(i), lane,
               [](const sched::TaskContext&) { return ok_status(); });
    }
    check(plan.finalize());
    return plan;
  };
  double overhead_us[2][2];  // [stream, host][trace off, on]
  for (int traced = 0; traced < 2; ++traced) {
    overhead_us[0][traced] =
        time_plan(*dev, empty_plan(sched::Lane::kCompute), repeats, traced).step_s / tasks * 1e6;
    overhead_us[1][traced] =
        time_plan(*dev, empty_plan(sched::Lane::kCpu), repeats, traced).step_s / tasks * 1e6;
  }
  std::printf("dispatch per task (%d independent empty tasks, median of %d replays):\n", tasks,
              repeats);
  std::printf("  compute stream: %.2f us (trace off), %.2f us (trace on)\n", overhead_us[0][0],
              overhead_us[0][1]);
  std::printf("  cpu lane:       %.2f us (trace off), %.2f us (trace on)\n", overhead_us[1][0],
              overhead_us[1][1]);
  // Dependency latency: a chain alternating the compute stream and the cpu lane, so every task
  // waits for the previous one to complete on another thread (event, callback, wake-up).
  sched::Plan chain;
  sched::TaskId prev = -1;
  const int chain_tasks = tasks / 10;
  for (int i = 0; i < chain_tasks; ++i) {
    const sched::Lane lane = i % 2 ? sched::Lane::kCpu : sched::Lane::kCompute;
    std::vector<sched::TaskId> deps;
    if (prev >= 0) deps.push_back(prev);
    prev = chain.add(
        "c" + std::to_string(i), lane, [](const sched::TaskContext&) { return ok_status(); }, deps);
  }
  check(chain.finalize());
  const double chain_us = time_plan(*dev, std::move(chain), repeats).step_s / chain_tasks * 1e6;
  std::printf("  dependency chain compute <-> cpu (%d tasks): %.2f us per task\n", chain_tasks,
              chain_us);
  const double task_overhead = std::max(overhead_us[0][1], overhead_us[1][1]);
  nlohmann::json out{
      {"bench", "scheduler"},
      {"layers", p.layers},
      {"compute_ms", c_s * 1e3},
      {"exposed_fraction", exposed_by_ratio},
      {"step_ms", step_by_ratio},
      {"task_overhead_us", task_overhead},
      {"dependency_latency_us", chain_us},
      {"task_overhead_trace_off_us", std::max(overhead_us[0][0], overhead_us[1][0])}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
