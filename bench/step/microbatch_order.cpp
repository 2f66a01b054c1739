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
  // [0] micro-batch-major, [1] segment-major reducing each micro-batch's gradient, [2]
  // segment-major summing them on the device (--device-grad-sum).
  constexpr int kOrders = 3;
  const char* names[kOrders] = {"micro", "layer", "layer+sum"};
  std::array<Stack, kOrders> stacks;
  for (int o = 0; o < kOrders; ++o) {
    Shape s = oc.shape;
    s.checkpoint = 1;
    s.layer_major = o >= 1;
    s.device_grad_sum = o == 2;
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
  for (int o = 0; o < kOrders; ++o) run(o, 1);  // warm-up
  std::array<std::vector<double>, kOrders> times;
  std::array<OrderStep, kOrders> last;
  for (int r = 0; r < oc.repeats; ++r) {
    for (int k = 0; k < kOrders; ++k) {
      const int o = r % 2 == 0 ? k : kOrders - 1 - k;  // forwards, then backwards
      last[size_t(o)] = run(o, 2 + r);
      times[size_t(o)].push_back(last[size_t(o)].step_s);
    }
  }
  std::array<double, kOrders> ms{};
  for (int o = 0; o < kOrders; ++o) ms[size_t(o)] = 1e3 * bench::median(times[size_t(o)]);
  const bool nvme = oc.param_home == engine::Home::kNvme;
  auto param_read = [&](const OrderStep& s) {
    return double(nvme ? s.lanes.nvme_read : s.lanes.h2d);
  };
  const double ratio = param_read(last[2]) / param_read(last[0]);
  const char* home = nvme ? "nvme" : "cpu";
  if (lead) {
    std::printf(
        "micro-batch order: stage 3, parameter shards on %s, %d micro-batches of B=%lld, "
        "checkpoint interval 1\n",
        home, micros, static_cast<long long>(oc.shape.batch));
    std::printf("  %-9s %10s %8s %10s %10s %12s %12s %10s\n", "order", "step ms", "speedup",
                "h2d MB", "d2h MB", "nvme rd MB", "nvme wr MB", "comm MB");
    for (int o = 0; o < kOrders; ++o) {
      const engine::ZeroLaneBytes& l = last[size_t(o)].lanes;
      std::printf("  %-9s %10.1f %7.2fx %10.2f %10.2f %12.2f %12.2f %10.2f\n", names[o],
                  ms[size_t(o)], ms[0] / ms[size_t(o)], double(l.h2d) * 1e-6, double(l.d2h) * 1e-6,
                  double(l.nvme_read) * 1e-6, double(l.nvme_write) * 1e-6,
                  double(last[size_t(o)].sent) * 1e-6);
    }
    std::printf("  segment-major: parameter %s bytes %.4fx of micro-batch-major's\n",
                nvme ? "NVMe read" : "upload", ratio);
  }
  return {{"offload_param", home},
          {"micro_batches", micros},
          {"micro_step_ms", ms[0]},
          {"layer_step_ms", ms[1]},
          {"layer_device_sum_step_ms", ms[2]},
          {"micro_lane_bytes", lanes_json(last[0].lanes)},
          {"layer_lane_bytes", lanes_json(last[1].lanes)},
          {"layer_device_sum_lane_bytes", lanes_json(last[2].lanes)},
          {"micro_comm_bytes", last[0].sent},
          {"layer_comm_bytes", last[1].sent},
          {"layer_device_sum_comm_bytes", last[2].sent},
          {"layer_major_param_read_bytes_ratio", ratio},
          {"layer_major_speedup", ms[0] / ms[2]},
          {"layer_major_reduce_each_speedup", ms[0] / ms[1]}};
}

}  // namespace strata::bench_zero
