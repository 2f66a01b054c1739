// bench_zero: the ZeRO step (engine/zero_step.h) under mpirun, stage 0 against stage 3 in the
// same run, with the optimizer state in host RAM and half on NVMe. Run it as
//   mpirun -np 2 build/bench/step/bench_zero [--quick]
// Each rank has a CpuDevice with one kernel thread whose host<->device link is throttled to a
// fixed ratio of its measured compute rate (--flops-per-byte, default 1000: an accelerator of
// 1000 TFLOP/s behind a 1 TB/s-class link, or 100 behind 100 GB/s; the CpuDevice's compute rate
// is measured first, on one rank, and the link rate follows). Stage 3 moves each layer up twice
// per step (its forward and backward gathers) where stage 0 moves it once; the goal is that
// the gathers hide behind compute: stage 3 >= 0.85x the tokens/s of stage 0, with the bytes
// each rank sends per step equal to (3Ψ - Ψ_shared)(N-1)/N (stage 3: ZeRO's 3Ψ less the shared
// block's backward gather, which it does not need) and 2Ψ(N-1)/N (stage 0) within
// 1%. Stage 0 and stage 3 alternate order every repeat (ABBA); medians of rank 0's step times.
// A third case offloads everything ZeRO-Infinity does: stage 3 with the parameter shards and
// half of the optimizer state on NVMe (the real disk under --nvme-path), against stage 0 with
// the same optimizer state; goal: exposed transfer < 5% of the step when the link and the disk
// carry the traffic in the compute time. For it the bench prints each transfer lane's busy time
// beside its bytes (ZeroStep::last_lane_bytes, the formula of docs/zero.md) over the lane's
// bandwidth (the link model; the disk's write and read rates measured through the swap store
// first), so a reader sees which resource bounds the step.
// --device cuda: the same on each rank's GPU (the local rank modulo the GPUs; --device-memory-gib
// of pool per stack, two stacks at once), with the real link instead of the model: the H2D and
// D2H rates for the lane table are measured first (pinned, 256 MiB, median of three), and the
// exposed-transfer figure is the trace's, as on the CpuDevice.
// Then (or alone, --order-only) the micro-batch order case (microbatch_order.h): stage 3 with the
// shards on NVMe and in pinned memory, --micro-batches K a step, micro-batch-major against
// segment-major (each micro-batch's gradient reduced, or summed on the device).
// Prints a table, then one JSON line (rank 0).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "comm/mpi_comm.h"
#include "cpu/pinned_memory.h"
#include "engine/session.h"
#include "gpu/cpu_device.h"
#include "gpu/device.h"
#include "microbatch_order.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/synthetic_task.h"
#include "nvme/swap_store.h"
#include "zero_stack.h"

using namespace strata;
using bench::Clock;
using bench::median;
using bench::seconds_since;
using namespace strata::bench_zero;

namespace {

STRATA_BENCH_CHECKS("bench_zero")

// Host->device and device->host rates of pinned copies of 256 MiB (median of three).
std::pair<double, double> measure_link(gpu::Device& dev) {
  const size_t bytes = size_t{256} << 20;
  auto host = check(cpu::default_pinned_pool().allocate(bytes));
  auto buf = check(dev.allocate(bytes));
  auto stream = check(dev.create_stream());
  std::vector<double> h2d, d2h;
  for (int k = 0; k < 4; ++k) {  // the first is a warm-up
    auto t0 = Clock::now();
    check(stream->copy(buf.data(), host.data(), bytes, gpu::CopyKind::kHostToDevice));
    check(stream->synchronize());
    if (k > 0) h2d.push_back(double(bytes) / seconds_since(t0));
    t0 = Clock::now();
    check(stream->copy(host.data(), buf.data(), bytes, gpu::CopyKind::kDeviceToHost));
    check(stream->synchronize());
    if (k > 0) d2h.push_back(double(bytes) / seconds_since(t0));
  }
  return {median(h2d), median(d2h)};
}

struct Timed {
  double step_s = 0, exposed_fraction = 0;
  std::string metrics;
  sched::StepMetrics m;
  engine::ZeroLaneBytes lanes;
  uint64_t sent = 0;  // comm bytes of the last step (reduce-scatter + all-gather)
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_zero: ZeRO stage 3 against stage 0 under mpirun, on the CpuDevice or GPU"};
  bool quick = false;
  std::string device = "cpu";
  double device_gib = 8.0;
  int repeats = 7;
  double flops_per_byte = 1000.0;
  Shape s;
  std::string nvme_path = ".";
  app.add_flag("--quick", quick, "fewer repeats");
  int micros = 8;
  bool order_only = false;
  app.add_option("--micro-batches", micros,
                 "the micro-batch order case: K micro-batches of --batch/K rows a step")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  app.add_flag("--order-only", order_only, "only the micro-batch order case");
  app.add_option("--layers", s.layers, "L")->capture_default_str();
  app.add_option("--channels", s.channels, "C")->capture_default_str();
  app.add_option("--heads", s.heads, "NH")->capture_default_str();
  app.add_option("--batch", s.batch, "B per rank")->capture_default_str();
  app.add_option("--seq", s.seq, "T")->capture_default_str();
  app.add_option("--prefetch-depth", s.prefetch_depth, "stage 3: gathers ahead")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--repeats", repeats, "timed steps per case (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--flops-per-byte", flops_per_byte,
                 "device compute rate over link rate (the link model)")
      ->check(CLI::Range(1.0, 1e7))
      ->capture_default_str();
  app.add_option("--nvme-path", nvme_path, "directory for the half-NVMe cases' swap files")
      ->capture_default_str();
  app.add_option("--device", device, "cpu (the modelled link) or cuda (this rank's GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--device-memory-gib", device_gib, "cuda: each stack's pool (two at once)")
      ->check(CLI::Range(0.25, 1024.0))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const double cuda_gib = device == "cuda" ? device_gib : 0.0;
  if (cuda_gib > 0 && gpu::cuda_device_count() == 0) {
    std::fprintf(stderr, "bench_zero: --device cuda: no CUDA GPU on this machine\n");
    return 2;
  }
  if (quick) repeats = std::min(repeats, 3);
  comm::CommOptions co;
  co.timeout_s = 600;
  auto world_r = check(comm::create_mpi_comm(co));
  comm::Communicator& world = *world_r;
  const bool lead = world.rank() == 0;
  const uint64_t n = static_cast<uint64_t>(world.size());

  // The device's compute rate: FLOPs of one stage-0 step over its compute lane's busy time. On
  // the CpuDevice the link follows from it; on a GPU it is measured.
  float link = 0.0f;
  double link_d2h = 0.0;
  {
    Stack cal = make_stack(s, 0, 0.0, "", 0.0, world, engine::Home::kPinned, cuda_gib);
    Batch b(s);
    double flops = 0;
    for (int64_t k = 0; k < cal.model->num_blocks(); ++k) {
      const auto c = cal.model->block_cost(k);
      flops += c.forward_flops + c.backward_flops;
    }
    std::vector<double> busy;
    for (int64_t step = 1; step <= 3; ++step) {
      b.make(step, world.rank());
      check(cal.step->run(b.tokens.data(), b.targets.data(), step).status());
      const auto& ex = *cal.step->executor();
      busy.push_back(sched::compute_metrics(ex.plan(), ex.last_trace())
                         .busy_ms[static_cast<int>(sched::Lane::kCompute)] *
                     1e-3);
    }
    if (cuda_gib > 0) {
      const auto [h2d, d2h] = measure_link(*cal.dev);
      link = static_cast<float>(h2d);
      link_d2h = d2h;
      if (lead) {
        std::printf(
            "GPT L=%lld C=%lld NH=%lld, %lld params, B=%lld T=%lld per rank, bf16, %llu ranks; "
            "%s at %.2f GFLOP/s (the step's compute lane), pinned H2D %.2f GB/s, D2H %.2f GB/s\n",
            static_cast<long long>(s.layers), static_cast<long long>(s.channels),
            static_cast<long long>(s.heads),
            static_cast<long long>(cal.model->config().num_params()),
            static_cast<long long>(s.batch), static_cast<long long>(s.seq),
            static_cast<unsigned long long>(n), cal.dev->name().c_str(),
            flops / median(busy) * 1e-9, h2d * 1e-9, d2h * 1e-9);
      }
    } else {
      link = static_cast<float>(flops / median(busy) / flops_per_byte);
      link_d2h = link;
    }
    check(world.broadcast(&link, 1, DType::kF32, 0));  // every rank gets rank 0's link
    if (lead && cuda_gib == 0) {
      std::printf(
          "GPT L=%lld C=%lld NH=%lld, %lld params, B=%lld T=%lld per rank, bf16, %llu ranks; "
          "CpuDevice 1 thread at %.2f GFLOP/s, link %.1f MB/s (%.0f FLOP/byte)\n",
          static_cast<long long>(s.layers), static_cast<long long>(s.channels),
          static_cast<long long>(s.heads), static_cast<long long>(cal.model->config().num_params()),
          static_cast<long long>(s.batch), static_cast<long long>(s.seq),
          static_cast<unsigned long long>(n), flops / median(busy) * 1e-9, link * 1e-6,
          flops_per_byte);
    }
  }

  const std::string dir = nvme_path + "/strata-bench-zero-" + std::to_string(world.rank());
  std::filesystem::create_directories(dir);
  nvme::SwapStoreOptions so;
  so.dirs = {dir};
  so.capacity_bytes = 512ull << 20;
  auto store = check(nvme::SwapStore::open(so));
  // The disk's rates through the store (64 MiB written, then read; the median of three).
  double disk_write = 0, disk_read = 0;
  {
    auto buf = check(cpu::default_pinned_pool().allocate(64 << 20));
    std::vector<double> w, r;
    for (int k = 0; k < 3; ++k) {
      auto t0 = Clock::now();
      check(store->write(uint64_t{1} << 50, buf.data(), buf.size_bytes()).wait());
      w.push_back(double(buf.size_bytes()) / seconds_since(t0));
      t0 = Clock::now();
      check(store->read(uint64_t{1} << 50, buf.data(), buf.size_bytes()).wait());
      r.push_back(double(buf.size_bytes()) / seconds_since(t0));
    }
    check(store->remove(uint64_t{1} << 50));
    disk_write = median(w);
    disk_read = median(r);
    if (lead) {
      std::printf("disk through the swap store: write %.0f MB/s, read %.0f MB/s\n",
                  disk_write * 1e-6, disk_read * 1e-6);
    }
  }

  if (lead) {
    std::printf("%-10s %12s %12s %10s %10s %14s\n", "optimizer", "stage0 tok/s", "stage3 tok/s",
                "ratio", "exposed", "bytes/theory");
  }
  nlohmann::json out{{"bench", "step"}, {"stage", 3}, {"ranks", n}, {"device", device}};
  const double tokens = static_cast<double>(s.batch * s.seq * static_cast<int64_t>(n));
  for (int kase = 0; kase < (order_only ? 0 : 3); ++kase) {
    const double frac = kase == 0 ? 0.0 : 0.5;
    const bool param_nvme = kase == 2;
    Stack z0 = make_stack(s, 0, frac, dir, link, world, engine::Home::kPinned, cuda_gib);
    Stack z3 = make_stack(s, 3, frac, dir, link, world,
                          param_nvme ? engine::Home::kNvme : engine::Home::kPinned, cuda_gib);
    Batch b(s);
    // A step, traced only where its trace is reported (tracing stalls a GPU stream twice a
    // task): the timed steps run untraced, the lane figures come from traced ones.
    auto run = [&](Stack& st, int64_t step, bool traced) {
      b.make(step, world.rank());
      world.reset_stats();
      st.step->set_trace(traced);
      const auto t0 = Clock::now();
      check(st.step->run(b.tokens.data(), b.targets.data(), step).status());
      Timed t;
      t.step_s = seconds_since(t0);
      if (traced) {
        const auto& ex = *st.step->executor();
        const sched::StepMetrics m = sched::compute_metrics(ex.plan(), ex.last_trace());
        t.exposed_fraction = m.exposed_transfer_ms / m.step_ms;
        t.metrics = m.describe();
        t.m = m;
      }
      t.lanes = st.step->last_lane_bytes();
      // Gradients and parameters: the reduce-scatters and all-gathers, less the all-gather of
      // the gradient statistics (stages 1-3; engine/zero_step.h).
      t.sent = world.stats(comm::CollectiveKind::kReduceScatter).bytes_sent +
               world.stats(comm::CollectiveKind::kAllGather).bytes_sent;
      if (st.step->stage() >= 1) t.sent -= (n - 1) * uint64_t(st.model->num_blocks()) * 16;
      return t;
    };
    run(z0, 1, false);  // warm-up
    run(z3, 1, false);
    std::vector<double> t0s, t3s, exposed;
    Timed last3, last0;
    for (int r = 0; r < repeats; ++r) {  // timed, the order alternating
      const int64_t step = 2 + r;
      for (int k = 0; k < 2; ++k) {
        if ((k == 0) == (r % 2 == 0)) {
          t0s.push_back(run(z0, step, false).step_s);
        } else {
          t3s.push_back(run(z3, step, false).step_s);
        }
      }
    }
    // Traced: the exposed-transfer share (median of up to 3) and the last steps' lanes.
    for (int r = 0; r < std::min(repeats, 3); ++r) {
      const int64_t step = 2 + repeats + r;
      last3 = run(z3, step, true);
      exposed.push_back(last3.exposed_fraction);
      last0 = run(z0, step, true);
    }
    int64_t psi = 0;
    for (int64_t k = 0; k < z3.model->num_blocks(); ++k) psi += z3.model->block_numel(k);
    // The shared block is gathered once at stage 3 (docs/zero.md#traffic).
    const double shared = static_cast<double>(z3.model->block_numel(z3.model->config().layers));
    const double theory3 = (3.0 * double(psi) - shared) * 2.0 * double(n - 1) / double(n);
    const double theory0 = 2.0 * 2.0 * double(psi) * double(n - 1) / double(n);
    const double over3 = n > 1 ? double(last3.sent) / theory3 : 1.0;
    const double over0 = n > 1 ? double(last0.sent) / theory0 : 1.0;
    const double tps0 = tokens / median(t0s), tps3 = tokens / median(t3s);
    const char* name = kase == 0 ? "cpu" : kase == 1 ? "half-nvme" : "param-nvme";
    if (lead) {
      std::printf("%-10s %12.0f %12.0f %9.3fx %9.1f%% %7.4f/%.4f\n", name, tps0, tps3, tps3 / tps0,
                  100.0 * median(exposed), over3, over0);
      std::printf("  last stage-3 step: %s\n", last3.metrics.c_str());
      std::printf("  last stage-0 step: %s\n", last0.metrics.c_str());
    }
    // Which resource bounds the stage-3 step: each lane's busy time against its bytes over its
    // bandwidth (the NVMe lane does reads and writes one after the other).
    const engine::ZeroLaneBytes& lb = last3.lanes;
    const double h2d_ms = 1e3 * double(lb.h2d) / link, d2h_ms = 1e3 * double(lb.d2h) / link_d2h;
    const double nvme_ms =
        1e3 * (double(lb.nvme_read) / disk_read + double(lb.nvme_write) / disk_write);
    const double comm_ms = last3.m.busy_ms[static_cast<int>(sched::Lane::kComm)];
    if (lead && param_nvme) {
      auto busy = [&](sched::Lane l) { return last3.m.busy_ms[static_cast<int>(l)]; };
      std::printf("  lanes of the last stage-3 step (%.2f ms; compute busy %.2f ms):\n",
                  last3.m.step_ms, busy(sched::Lane::kCompute));
      std::printf("    %-5s %12s %10s %12s\n", "lane", "bytes", "busy ms", "bytes/bw ms");
      std::printf("    %-5s %12llu %10.2f %12.2f\n", "h2d", (unsigned long long)lb.h2d,
                  busy(sched::Lane::kH2D), h2d_ms);
      std::printf("    %-5s %12llu %10.2f %12.2f\n", "d2h", (unsigned long long)lb.d2h,
                  busy(sched::Lane::kD2H), d2h_ms);
      std::printf("    %-5s %12llu %10.2f %12.2f  (read %llu, write %llu)\n", "nvme",
                  (unsigned long long)(lb.nvme_read + lb.nvme_write), busy(sched::Lane::kNvme),
                  nvme_ms, (unsigned long long)lb.nvme_read, (unsigned long long)lb.nvme_write);
      std::printf("    %-5s %12llu %10.2f %12s\n", "comm", (unsigned long long)last3.sent, comm_ms,
                  "-");
    }
    nlohmann::json c{{"tokens_per_s", tps3},
                     {"stage0_tokens_per_s", tps0},
                     {"ratio", tps3 / tps0},
                     {"exposed_fraction", median(exposed)},
                     {"comm_bytes_over_theory", over3},
                     {"stage0_comm_bytes_over_theory", over0},
                     {"offload_optimizer", frac == 0.0 ? "cpu" : "nvme"},
                     {"optimizer_nvme_fraction", frac},
                     {"offload_param", param_nvme ? "nvme" : "cpu"}};
    if (param_nvme) {
      c["lane_bytes"] = {{"h2d", lb.h2d},
                         {"d2h", lb.d2h},
                         {"nvme_read", lb.nvme_read},
                         {"nvme_write", lb.nvme_write}};
      c["lane_busy_ms"] = {{"h2d", last3.m.busy_ms[static_cast<int>(sched::Lane::kH2D)]},
                           {"d2h", last3.m.busy_ms[static_cast<int>(sched::Lane::kD2H)]},
                           {"nvme", last3.m.busy_ms[static_cast<int>(sched::Lane::kNvme)]},
                           {"compute", last3.m.busy_ms[static_cast<int>(sched::Lane::kCompute)]}};
      c["lane_formula_ms"] = {{"h2d", h2d_ms}, {"d2h", d2h_ms}, {"nvme", nvme_ms}};
    }
    out[name] = c;
    if (frac == 0.0) {
      for (const auto& [k, v] : c.items()) out[k] = v;
    }
  }
  // The micro-batch order (issue 31): stage 3, the parameter shards on NVMe, then in pinned
  // memory, K micro-batches of the same tokens a step as the cases above.
  for (const engine::Home home : {engine::Home::kNvme, engine::Home::kPinned}) {
    OrderCase oc;
    oc.shape = s;
    oc.shape.micros = micros;
    oc.shape.batch = std::max<int64_t>(1, s.batch / micros);
    oc.param_home = home;
    oc.nvme_dir = dir;
    oc.link = link;
    oc.cuda_gib = cuda_gib;
    oc.repeats = repeats;
    const nlohmann::json c = run_order_case(oc, world);
    if (home == engine::Home::kNvme) {
      out["microbatch_order_nvme"] = c;
      out["layer_major_param_read_bytes_ratio"] = c["layer_major_param_read_bytes_ratio"];
      out["layer_major_speedup"] = c["layer_major_speedup"];
    } else {
      out["microbatch_order_cpu"] = c;
    }
  }
  store.reset();
  std::filesystem::remove_all(dir);
  if (lead) std::printf("%s\n", out.dump().c_str());
  return 0;
}
