// What a step reports besides its result: the bytes one rank holds by tier and kind, the bytes it
// moves per step over each transfer lane, and its collective traffic by purpose, measured and in
// theory. The ZeRO step fills them from its plan (zero_step.h); TrainStep hands them out
// (train_step.h), so that a front end prints them without knowing which step runs.
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <string>

namespace strata::engine {

// Bytes one rank holds, by tier and kind (ZeroStep::memory()).
struct ZeroMemory {
  // The model state at its home, counted once: 16-bit parameters (device blocks, or the
  // shards at their homes at stage 3), 16-bit gradients (device blocks at stages 0-1, pinned shards
  // at 2-3) and the fp32 master, m and v (host RAM, NVMe), 12 bytes per element.
  int64_t params16 = 0, grads16 = 0, master = 0, exp_avg = 0, exp_avg_sq = 0;
  int64_t params_device = 0;  // the part of params16 on the device (whole blocks and shards)
  int64_t grads_device =
      0;  // the part of grads16 on the device (whole blocks, stages 0-1; kept shards)
  int64_t params_nvme = 0;       // the part of params16 on NVMe (stage-3 shards)
  int64_t optimizer_nvme = 0;    // the part of master + m + v on NVMe
  int64_t optimizer_device = 0;  // offload_optimizer kNone: master + m + v on the device (the
                                 // optimizer's host copy then only holds the initial state)
  // Working set and copies: device activations (the model's), the plan's device peak (gathered
  // parameters and gradients in flight), pinned staging (the plan's pinned peak less the homes
  // above: gradient reduction buffers, new-parameter buffers, gathered host copies, NVMe staging).
  int64_t device_activations = 0, device_working = 0, pinned_working = 0;
  // The working sets by kind, each its own peak over the step (so they need not add up):
  // gathered parameter copies, gradients in flight (device) or awaiting reduction and whole
  // reduction buffers (pinned), the device optimizer's gradient/new-parameter buffers, the
  // new-parameter staging (pinned, whole blocks) and the NVMe read/write staging.
  int64_t device_gathered = 0, device_grads_in_flight = 0, device_optimizer_io = 0;
  int64_t pinned_gathered = 0, pinned_grads = 0, pinned_params = 0, pinned_nvme_staging = 0;
  // Offloaded activation checkpoints: on the device (written or brought back), in pinned memory
  // (kept there, or staged to and from NVMe), and on NVMe.
  int64_t device_checkpoints = 0, pinned_checkpoints = 0, nvme_checkpoints = 0;
  int64_t model_state() const { return params16 + grads16 + master + exp_avg + exp_avg_sq; }
  std::string describe() const;
};

// Bytes one rank moves per step over each transfer lane (ZeroStep::last_lane_bytes()): the model
// state's transfers (parameters, gradients, optimizer state); the batch and the loss are not
// counted. docs/zero.md gives the formula per combination of tiers.
struct ZeroLaneBytes {
  uint64_t h2d = 0, d2h = 0, nvme_read = 0, nvme_write = 0;
};

// Bytes one rank moves per step, by purpose (the comm layer's textbook accounting).
struct ZeroTraffic {
  uint64_t grad_reduce_scatter = 0;  // gradients, reduce-scatter
  uint64_t grad_all_gather = 0;      // stage 0: the reduced gradients all-gathered
  uint64_t param_all_gather = 0;     // new parameters (stages 1-3) and stage-3 gathers
  uint64_t stats = 0;                // gradient statistics and the loss
  // Of the above, the bytes of collectives on device buffers (Collectives::kDevice): what the
  // links between the devices carry (NVLink, or the network between machines).
  uint64_t device_link = 0;
  uint64_t total() const {
    return grad_reduce_scatter + grad_all_gather + param_all_gather + stats;
  }
};

// A step's traffic: the last step's collectives and lanes, and the collectives' theory.
struct StepTraffic {
  ZeroTraffic last;      // sent by this rank in the last step, by purpose
  ZeroTraffic expected;  // the textbook formula for one step (ZeroStep::expected_traffic)
  ZeroLaneBytes lanes;   // the last step's transfer lanes
};

}  // namespace strata::engine
