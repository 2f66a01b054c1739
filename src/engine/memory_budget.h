// Pre-flight checks of one rank's memory budgets (--host-memory-limit, --gpu-memory-limit): what
// a configuration needs on a tier against its budget, checked before the tier's large
// allocations. A plan that does not fit is refused with one line naming the tier, the bytes
// needed and what needs them, the budget, and the flags that would make it fit.
#pragma once

#include <cstdint>
#include <functional>

#include "core/status.h"

namespace strata::engine {

// Pinned host memory of one rank (the engine's host bytes: pageable use is a few scratch
// buffers, not counted).
struct PinnedNeeds {
  uint64_t optimizer_state = 0;    // fp32 master, m, v kept in host RAM
  uint64_t optimizer_staging = 0;  // the optimizer's own NVMe staging
  uint64_t plan = 0;               // the step plan's peak (0 before it is planned)
  // What flags could move elsewhere, for the advice. optimizer_at(f): the pinned bytes of the
  // optimizer's side (its arena, its staging and the plan's NVMe staging) with a share f of the
  // state on NVMe; optimizer_now: the same now. Unset: no optimizer advice.
  // optimizer_at(f) must not be below what the plan would really take (an upper bound is fine).
  std::function<uint64_t(double)> optimizer_at;
  double optimizer_fraction = 0.0;  // the share on NVMe now (the advice offers more)
  uint64_t optimizer_now = 0;       // what that side really takes now
  uint64_t param_shards = 0;        // stage-3 parameter shards homed in pinned memory
  uint64_t checkpoints = 0;         // activation checkpoints homed in pinned memory
  uint64_t total() const { return optimizer_state + optimizer_staging + plan; }
};
// limit 0: no budget.
Status check_pinned_budget(const PinnedNeeds& needs, uint64_t limit);

// Device memory of one rank.
struct DeviceNeeds {
  uint64_t in_use = 0;  // allocated already: the model's blocks and activations, the device
                        // optimizer's state
  uint64_t plan = 0;    // the step plan's peak
  // For the advice.
  int stage = 0;
  uint64_t param_shards = 0;  // stage-3 shards homed on the device
  uint64_t activations = 0;   // checkpoints the model keeps that --offload-activations moves
  bool device_optimizer = false;
  int prefetch_depth = 0;
  uint64_t total() const { return in_use + plan; }
};
Status check_device_budget(const DeviceNeeds& needs, uint64_t limit);

}  // namespace strata::engine
