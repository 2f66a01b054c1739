// Lowering, the step-long pinned buffers and the shards' device homes: per block its whole
// gradient (gfull, padded; kept for the step at stages 0-1, where the next run's update reads
// it; at stages 2-3 held from its transfer to its reduction, and one per gradient slot; with the
// collectives on the device, at stages 2-3 the reduced shard's landing place only), its
// reduced gradient shard (gshard, stages 2-3), its new parameters (pbuf: padded, the rank's
// shard written by Adam then all-gathered; at stage 3 the parameter shard itself, or for a shard
// homed off pinned memory its staging after the update) and a shard's device home (dshard).
// A gradient kept on the device (Layout::grads_on_device) has no pinned buffers: its reduced
// shard is kept in dgrad (stages 1-3; at stage 0 the model's gradient block holds the reduced
// gradient), and its statistics go through dstats (device) to hstats (pinned).
// Takes the layout and the bucket size (ZeroStepOptions::bucket_bytes); returns the buffers and
// the sizes the budgets count.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/zero/plan/builder.h"
#include "engine/zero/plan/layout.h"

namespace strata::engine::zero {

struct HostBuffers {
  std::vector<sched::BufferId> gfull;   // by Layout::at(slot, block)
  std::vector<sched::BufferId> gshard;  // by block (-1 below stage 2)
  std::vector<sched::BufferId> pbuf;    // by block
  std::vector<sched::BufferId> dshard;  // by block (-1: no device home)
  std::vector<sched::BufferId> dgrad;   // by block (-1: the gradient not kept on the device)
  // [block][rank][2] doubles (Runtime::stats is [rank][block][2]; -1: no gradient kept there).
  sched::BufferId dstats = -1, hstats = -1;
  // For the budgets: the pinned bytes of the step-long buffers, the gradients awaiting their
  // reduction (stages 2-3), the device homes, the largest padded block, and the largest shard
  // homed off pinned memory and on NVMe (their staging).
  uint64_t pinned = 0, in_flight = 0, device_homes = 0, largest = 0;
  uint64_t device_grads = 0;  // dgrad and dstats
  uint64_t largest_moving = 0, largest_nvme = 0;
};

HostBuffers lower_host_buffers(PlanBuilder& pb, const Layout& lay, uint64_t bucket_bytes);

}  // namespace strata::engine::zero
