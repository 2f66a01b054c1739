#include "planner/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace strata::planner {

PlanReport make_plan_report(const engine::ZeroStep& step,
                            const engine::OffloadedOptimizer& optimizer, const gpu::Device& device,
                            const PlanBudgets& budgets) {
  PlanReport r;
  const engine::ZeroMemory z = step.memory();
  auto row = [&](ReportTier t, std::string kind, int64_t bytes) {
    if (bytes > 0) r.rows.push_back({t, std::move(kind), static_cast<uint64_t>(bytes)});
  };
  using T = ReportTier;
  row(T::kDevice, "16-bit params, resident", z.params_device);
  row(T::kDevice, "16-bit params, gathered in flight", z.device_gathered);
  row(T::kDevice, "16-bit grads, resident", z.grads_device);
  row(T::kDevice, "16-bit grads, in flight", z.device_grads_in_flight);
  row(T::kDevice, "fp32 master + m + v", z.optimizer_device);
  row(T::kDevice, "optimizer grads and new params in flight", z.device_optimizer_io);
  row(T::kDevice, "activations of one segment + kept checkpoints", z.device_activations);
  row(T::kDevice, "activation checkpoints brought back", z.device_checkpoints);
  const auto host_state = static_cast<int64_t>(optimizer.host_state_bytes());
  row(T::kPinned, "fp32 master", host_state / 3);
  row(T::kPinned, "Adam m", host_state / 3);
  row(T::kPinned, "Adam v", host_state / 3);
  row(T::kPinned, "16-bit param shards (home)", z.params16 - z.params_device - z.params_nvme);
  row(T::kPinned, "16-bit grad shards (home)", z.grads16 - z.grads_device);
  row(T::kPinned, "gradient buckets", z.pinned_grads);
  row(T::kPinned, "new 16-bit params (staging)", z.pinned_params);
  row(T::kPinned, "gathered params", z.pinned_gathered);
  row(T::kPinned, "NVMe staging",
      z.pinned_nvme_staging + static_cast<int64_t>(optimizer.staging_bytes()));
  row(T::kPinned, "activation checkpoints", z.pinned_checkpoints);
  row(T::kPageable, "batch (tokens, targets)", static_cast<int64_t>(budgets.pageable_bytes));
  // NVMe: each object in whole extents of the store.
  const uint64_t ext = std::max<uint64_t>(budgets.nvme_extent, 1);
  auto extents = [ext](uint64_t bytes) { return (bytes + ext - 1) / ext * ext; };
  int64_t nvme_state = 0, nvme_params = 0, nvme_checkpoints = 0;
  for (size_t p = 0; p < optimizer.num_partitions(); ++p) {
    if (optimizer.on_nvme(p)) nvme_state += int64_t(extents(optimizer.state_bytes(p)));
  }
  const engine::Partitioning& parts = step.partitioning();
  for (size_t b = 0; b < parts.num_blocks(); ++b) {
    if (step.param_home(int64_t(b)) != engine::Home::kNvme) continue;
    nvme_params += int64_t(extents(uint64_t(parts.block(b).shard_numel) * step.dtype_bytes()));
  }
  if (step.checkpoints_on_nvme() > 0) {
    nvme_checkpoints = step.checkpoints_on_nvme() * int64_t(extents(step.checkpoint_bytes()));
  }
  row(T::kNvme, "fp32 master + m + v", nvme_state);
  row(T::kNvme, "16-bit param shards", nvme_params);
  row(T::kNvme, "activation checkpoints", nvme_checkpoints);
  const sched::Plan& plan = step.plan();
  const gpu::MemoryInfo info = device.memory_info();
  r.peak[int(T::kDevice)] = info.used_bytes + plan.peak_bytes(sched::Tier::kDevice);
  r.peak[int(T::kPinned)] = optimizer.host_state_bytes() + optimizer.staging_bytes() +
                            plan.peak_bytes(sched::Tier::kPinnedHost);
  r.peak[int(T::kPageable)] = budgets.pageable_bytes;
  r.peak[int(T::kNvme)] = uint64_t(nvme_state + nvme_params + nvme_checkpoints);
  r.budget[int(T::kDevice)] = info.limit_bytes;
  r.budget[int(T::kPinned)] = budgets.host_limit;
  r.budget[int(T::kNvme)] = budgets.nvme_free;
  r.fit = step.plan_only() ? step.fit() : ok_status();
  return r;
}

std::string human_bytes(uint64_t bytes) {
  char out[32];
  const double b = static_cast<double>(bytes);
  if (b < double(1 << 20)) {
    std::snprintf(out, sizeof(out), "%.1f KiB", b / 1024.0);
  } else if (b < double(1 << 30)) {
    std::snprintf(out, sizeof(out), "%.1f MiB", b / double(1 << 20));
  } else {
    std::snprintf(out, sizeof(out), "%.2f GiB", b / double(1 << 30));
  }
  return out;
}

std::string PlanReport::table() const {
  static constexpr const char* kTier[kNumReportTiers] = {"device", "pinned host", "pageable host",
                                                         "NVMe"};
  std::ostringstream os;
  char line[160];
  std::snprintf(line, sizeof(line), "%-14s %-46s %14s\n", "tier", "kind", "bytes");
  os << line;
  for (int t = 0; t < kNumReportTiers; ++t) {
    for (const Row& row : rows) {
      if (int(row.tier) != t) continue;
      std::snprintf(line, sizeof(line), "%-14s %-46s %14s\n", kTier[t], row.kind.c_str(),
                    human_bytes(row.bytes).c_str());
      os << line;
    }
    if (peak[t] == 0) continue;
    const std::string against = budget[t] == 0 ? std::string("no budget")
                                               : "budget " + human_bytes(budget[t]) +
                                                     (peak[t] <= budget[t] ? ", fits" : ", OVER");
    std::snprintf(line, sizeof(line), "%-14s %-46s %14s  (%s)\n", kTier[t], "peak",
                  human_bytes(peak[t]).c_str(), against.c_str());
    os << line;
  }
  if (prediction) {
    const sched::Prediction& p = *prediction;
    using sched::Work;
    auto w = [&](Work k) { return static_cast<uint64_t>(p.work[static_cast<int>(k)]); };
    os << "per step: h2d " << human_bytes(w(Work::kH2DBytes)) << ", d2h "
       << human_bytes(w(Work::kD2HBytes)) << ", NVMe read " << human_bytes(w(Work::kNvmeReadBytes))
       << ", NVMe write " << human_bytes(w(Work::kNvmeWriteBytes)) << ", network sent "
       << human_bytes(w(Work::kNetBytes) + w(Work::kNetReduceBytes)) << "\n";
    os << p.describe() << "\n";
  }
  os << (fit.ok() ? std::string("fits: yes") : "fits: no: " + fit.message()) << "\n";
  return os.str();
}

}  // namespace strata::planner
