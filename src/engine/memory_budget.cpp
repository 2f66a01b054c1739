#include "engine/memory_budget.h"

#include <sstream>
#include <string>

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
  os << "--host-memory-limit " << mib(limit) << ": pinned host memory needs "
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
      os << sep << "--offload-optimizer nvme --optimizer-nvme-fraction " << f;
      sep = ", or ";
      break;
    }
  }
  if (n.param_shards >= over) {
    os << sep << "--offload-param nvme (" << mib(n.param_shards) << " of parameter shards)";
    sep = ", or ";
  }
  if (n.checkpoints >= over) {
    os << sep << "--offload-activations nvme (" << mib(n.checkpoints) << " of checkpoints)";
    sep = ", or ";
  }
  os << sep << "--host-memory-limit " << size_flag(n.total());
  return make_error(ErrorCode::kOutOfMemory, os.str());
}

Status check_device_budget(const DeviceNeeds& n, uint64_t limit) {
  if (limit == 0 || n.total() <= limit) return ok_status();
  const uint64_t over = n.total() - limit;
  std::ostringstream os;
  os << "--gpu-memory-limit " << mib(limit) << ": the device needs " << mib(n.total())
     << " per rank (in use " << mib(n.in_use)
     << ": the model's blocks and activations, the optimizer there; the step plan " << mib(n.plan)
     << ": gathered layers, gradients and checkpoints in flight), " << mib(over)
     << " over; it may fit with";
  const char* sep = " ";
  auto suggest = [&](const std::string& s) {
    os << sep << s;
    sep = ", or ";
  };
  if (n.stage < 3) suggest("--zero-stage 3");
  if (n.param_shards > 0) {
    suggest("--offload-param cpu or a lower --param-gpu-fraction (" + mib(n.param_shards) +
            " of shards there)");
  }
  if (n.activations >= over) suggest("--offload-activations cpu");
  if (n.device_optimizer) suggest("--offload-optimizer cpu");
  if (n.prefetch_depth > 0 && n.stage == 3) suggest("--prefetch-depth 0");
  suggest("--gpu-memory-limit " + size_flag(n.total()));
  return make_error(ErrorCode::kOutOfMemory, os.str());
}

}  // namespace strata::engine
