// bench_zero's micro-batch order case (microbatch_order.h).
#include "microbatch_order.h"

#include <array>
#include <cstdio>
#include <vector>

#include "bench_util.h"

namespace strata::bench_zero {
namespace {
STRATA_BENCH_CHECKS("bench_zero")

struct OrderStep {
  double step_s = 0;
  engine::ZeroLaneBytes lanes;
  uint64_t sent = 0;  // comm bytes (every collective kind)
};

nlohmann::json lanes_json(const engine::ZeroLaneBytes& l) {
  return {{"h2d", l.h2d}, {"d2h", l.d2h}, {"nvme_read", l.nvme_read}, {"nvme_write", l.nvme_write}};
}

}  // namespace

nlohmann::json run_order_case(const OrderCase& oc, comm::Communicator& world) {
  const bool lead = world.rank() == 0;
  const int micros = oc.shape.micros;
  std::array<Stack, 2> stacks;  // [0] micro-batch-major, [1] segment-major
  for (int o = 0; o < 2; ++o) {
    Shape s = oc.shape;
    s.checkpoint = 1;
    s.layer_major = o == 1;
    stacks[size_t(o)] =
        make_stack(s, 3, 0.0, oc.nvme_dir, oc.link, world, oc.param_home, oc.cuda_gib);
  }
  Batch b(oc.shape);
  auto run = [&](int o, int64_t step) {
    b.make(step, world.rank());
    world.reset_stats();
    const auto t0 = bench::Clock::now();
    check(stacks[size_t(o)].step->run(b.tokens.data(), b.targets.data(), step, micros).status());
    OrderStep r;
    r.step_s = bench::seconds_since(t0);
    r.lanes = stacks[size_t(o)].step->last_lane_bytes();
    for (size_t k = 0; k < comm::kNumCollectiveKinds; ++k) {
      r.sent += world.stats(static_cast<comm::CollectiveKind>(k)).bytes_sent;
    }
    return r;
  };
  run(0, 1);  // warm-up
  run(1, 1);
  std::array<std::vector<double>, 2> times;
  std::array<OrderStep, 2> last;
  for (int r = 0; r < oc.repeats; ++r) {
    for (int k = 0; k < 2; ++k) {
      const int o = (k + r) % 2;  // ABBA
      last[size_t(o)] = run(o, 2 + r);
      times[size_t(o)].push_back(last[size_t(o)].step_s);
    }
  }
  const double ms[2] = {1e3 * bench::median(times[0]), 1e3 * bench::median(times[1])};
  const bool nvme = oc.param_home == engine::Home::kNvme;
  auto param_read = [&](const OrderStep& s) {
    return double(nvme ? s.lanes.nvme_read : s.lanes.h2d);
  };
  const double ratio = param_read(last[1]) / param_read(last[0]);
  const double speedup = ms[0] / ms[1];
  const char* home = nvme ? "nvme" : "cpu";
  if (lead) {
    std::printf(
        "micro-batch order: stage 3, parameter shards on %s, %d micro-batches of B=%lld, "
        "checkpoint interval 1\n",
        home, micros, static_cast<long long>(oc.shape.batch));
    std::printf("  %-6s %10s %10s %10s %12s %12s %10s\n", "order", "step ms", "h2d MB", "d2h MB",
                "nvme rd MB", "nvme wr MB", "comm MB");
    for (int o = 0; o < 2; ++o) {
      const engine::ZeroLaneBytes& l = last[size_t(o)].lanes;
      std::printf("  %-6s %10.1f %10.2f %10.2f %12.2f %12.2f %10.2f\n", o == 0 ? "micro" : "layer",
                  ms[o], double(l.h2d) * 1e-6, double(l.d2h) * 1e-6, double(l.nvme_read) * 1e-6,
                  double(l.nvme_write) * 1e-6, double(last[size_t(o)].sent) * 1e-6);
    }
    std::printf("  layer: parameter %s bytes %.4fx of micro's, step %.2fx faster\n",
                nvme ? "NVMe read" : "upload", ratio, speedup);
  }
  return {{"offload_param", home},
          {"micro_batches", micros},
          {"micro_step_ms", ms[0]},
          {"layer_step_ms", ms[1]},
          {"micro_lane_bytes", lanes_json(last[0].lanes)},
          {"layer_lane_bytes", lanes_json(last[1].lanes)},
          {"micro_comm_bytes", last[0].sent},
          {"layer_comm_bytes", last[1].sent},
          {"layer_major_param_read_bytes_ratio", ratio},
          {"layer_major_speedup", speedup}};
}

}  // namespace strata::bench_zero
