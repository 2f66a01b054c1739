#include "engine/memory_budget.h"

#include <sstream>
#include <string>

#include "engine/engine_config.h"

namespace strata::engine {

namespace {
std::string mib(uint64_t bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << static_cast<double>(bytes) / double(1 << 20) << " MiB";
  return os.str();
}
// The size flag value that would hold `bytes` (whole MiB, rounded up).
std::string size_flag(uint64_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + "MiB";
}
}  // namespace

Status check_pinned_budget(const PinnedNeeds& n, uint64_t limit) {
  if (limit == 0 || n.total() <= limit) return ok_status();
  const uint64_t over = n.total() - limit;
  std::ostringstream os;
  os << ref(Field::kHostMemoryLimit) << " " << mib(limit) << ": pinned host memory needs "
     << (n.plan > 0 ? "" : "at least ") << mib(n.total()) << " per rank (optimizer state "
     << mib(n.optimizer_state) << ", its NVMe staging " << mib(n.optimizer_staging)
     << ", the step plan " << (n.plan > 0 ? mib(n.plan) : std::string("not counted yet")) << "), "
     << mib(over) << " over; " << (n.plan > 0 ? "it fits with" : "it needs at least");
  const char* sep = " ";
  // The smallest larger NVMe share of the optimizer state, in steps of 0.05, whose pinned side
  // fits.
  for (int k = int(n.optimizer_fraction * 20.0) + 1; n.optimizer_at && k <= 20; ++k) {
    const double f = k / 20.0;
    if (n.total() - n.optimizer_now + n.optimizer_at(f) <= limit) {
      os << sep << ref(Field::kOffloadOptimizer) << " nvme " << ref(Field::kOptimizerNvmeFraction)
         << " " << f;
      sep = ", or ";
      break;
    }
  }
  if (n.param_shards >= over) {
    os << sep << ref(Field::kOffloadParam) << " nvme (" << mib(n.param_shards)
       << " of parameter shards)";
    sep = ", or ";
  }
  if (n.checkpoints >= over) {
    os << sep << ref(Field::kOffloadActivations) << " nvme (" << mib(n.checkpoints)
       << " of checkpoints)";
    sep = ", or ";
  }
  os << sep << ref(Field::kHostMemoryLimit) << " " << size_flag(n.total());
  return make_error(ErrorCode::kOutOfMemory, os.str());
}

Status check_device_budget(const DeviceNeeds& n, uint64_t limit) {
  if (limit == 0 || n.total() <= limit) return ok_status();
  const uint64_t over = n.total() - limit;
  std::ostringstream os;
  os << ref(Field::kGpuMemoryLimit) << " " << mib(limit) << ": the device needs " << mib(n.total())
     << " per rank (in use " << mib(n.in_use)
     << ": the model's blocks and activations, the optimizer there; the step plan " << mib(n.plan)
     << ": gathered layers, gradients and checkpoints in flight), " << mib(over)
     << " over; it may fit with";
  const char* sep = " ";
  auto suggest = [&](const std::string& s) {
    os << sep << s;
    sep = ", or ";
  };
  if (n.stage < 3) suggest(ref(Field::kZeroStage) + " 3");
  if (n.param_shards > 0) {
    suggest(ref(Field::kOffloadParam) + " cpu or a lower " + ref(Field::kParamGpuFraction) + " (" +
            mib(n.param_shards) + " of shards there)");
  }
  if (n.activations >= over) suggest(ref(Field::kOffloadActivations) + " cpu");
  if (n.device_optimizer) suggest(ref(Field::kOffloadOptimizer) + " cpu");
  if (n.prefetch_depth > 0 && n.stage == 3) suggest(ref(Field::kPrefetchDepth) + " 0");
  suggest(ref(Field::kGpuMemoryLimit) + " " + size_flag(n.total()));
  return make_error(ErrorCode::kOutOfMemory, os.str());
}

}  // namespace strata::engine
