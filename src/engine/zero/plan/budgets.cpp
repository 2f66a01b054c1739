#include "engine/zero/plan/budgets.h"

#include <algorithm>

#include "engine/zero/plan/builder.h"

namespace strata::engine::zero {

sched::Budgets plan_budgets(const Layout& lay, const HostBuffers& hb, const BudgetInput& in) {
  using sched::Tier;
  uint64_t largest_dev = 0;
  for (size_t b = 0; b < lay.nb(); ++b) {
    const int64_t bb = int64_t(b);
    // What the device collectives act on is padded.
    largest_dev = std::max<uint64_t>(
        largest_dev, round_device(lay.on_device ? lay.padded_bytes(bb) : lay.block_bytes(bb)));
  }
  // With the collectives on the device: the gradient buckets of stages 0-1 and the new
  // parameters' padded copies of the blocks kept whole.
  const uint64_t device_collective_buffers =
      !lay.on_device ? 0 : (lay.stage <= 1 ? 3 * largest_dev : 0) + 2 * largest_dev;
  sched::Budgets budgets;
  const uint64_t ck_micros = in.segments == 0 ? 0 : in.checkpoints / uint64_t(in.segments);
  const uint64_t ck_pinned = in.segments == 0 ? 0
                             : in.checkpoint_home == Home::kPinned
                                 ? in.checkpoints * round_page(in.checkpoint_bytes)
                                 : (2 + 2 * ck_micros) * round_page(in.checkpoint_bytes);
  budgets.bytes[static_cast<int>(Tier::kPinnedHost)] =
      ck_pinned + hb.pinned + hb.in_flight +
      static_cast<uint64_t>(in.staging_slots) * (in.slot_bytes + hb.largest_moving) +
      (in.gathers ? (in.depth + 2) * (round_page(hb.largest) + hb.largest_nvme) : 0);
  if (lay.stage >= 2 || in.largest_opt > 0 || hb.device_grads > 0) {
    const uint64_t k = static_cast<uint64_t>(in.checkpoint_interval);
    const uint64_t segment = k == 0 ? uint64_t(lay.layers) : k;
    const uint64_t grads = in.micros <= 1  ? 3
                           : lay.slots > 1 ? 2 + uint64_t(lay.slots)
                                           : 2 + segment;
    budgets.bytes[static_cast<int>(Tier::kDevice)] =
        (in.segments == 0 ? 0 : (2 + ck_micros) * round_device(in.checkpoint_bytes)) +
        hb.device_homes + hb.device_grads + (lay.stage >= 2 ? grads * largest_dev : 0) +
        (in.gathers ? (in.depth + k + 2) * largest_dev : 0) + 4 * in.largest_opt +
        device_collective_buffers;
  }
  return budgets;
}

void bound_staging(sched::Plan& plan, const std::vector<size_t>& visit, const UpdateTasks& t,
                   int staging_slots) {
  const auto slots = static_cast<size_t>(staging_slots);
  auto bound = [&](const std::vector<sched::TaskId>& acquirer,
                   const std::vector<sched::TaskId>& releaser) {
    std::vector<size_t> order;
    for (size_t p : visit) {
      if (acquirer[p] >= 0 && releaser[p] >= 0) order.push_back(p);
    }
    for (size_t i = slots; i < order.size(); ++i) {
      plan.depend(acquirer[order[i]], releaser[order[i - slots]]);
    }
  };
  bound(t.read, t.state_written);
  bound(t.shard_acquirer, t.shard_home);
}

}  // namespace strata::engine::zero
