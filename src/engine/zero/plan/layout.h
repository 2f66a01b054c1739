// zero::Layout: the facts of a ZeRO step that every stage of the plan compiler reads and none
// changes: the blocks and their shards (partition.h), the home of each block's 16-bit
// parameters between uses, the ZeRO stage, the ranks, the dtypes, the gradient slots, and the
// two choices that shape the update (rotated, delayed). ZeroStep makes it once (make_layout)
// and keeps it; the compiler's stages take it by const reference.
//
// Thread safety: immutable after make_layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "engine/engine_config.h"
#include "engine/partition.h"

namespace strata::engine::zero {

struct Layout {
  Partitioning parts;
  std::vector<int64_t> blocks;  // partition -> block (the optimizer's partitions)
  std::vector<size_t> part_of;  // block -> partition
  // By block: where its 16-bit parameters live between uses: kDevice for blocks kept whole on
  // the device (stages 0-2, persistent blocks), else the stage-3 shard's home.
  std::vector<Home> home;
  int stage = 0;
  int rank = 0, ranks = 1;
  int64_t layers = 0;  // the shared block is block `layers`
  DType dt = DType::kF32;
  // Stages 2-3: the dtype the micro-batches' reduced gradient shards add up in (fp32 with
  // fp32_grad_accum); dt otherwise.
  DType acc = DType::kF32;
  // Gradient slots: at stages 2-3 in the segment-major order without the device sum, each
  // micro-batch's gradient of a block has its own buffers and reduction (slot = micro-batch),
  // so the reduced shards add up in micro-batch order; else 1.
  int slots = 1;
  // The update of step n runs at the start of step n+1's replay (clipping, fp16, the device
  // optimizer, the delayed update: zero_step.h); the delayed update (--delayed-update).
  bool rotate = true, delayed = false;
  // Collectives::kDevice: the collectives run on device buffers (Runtime::dcomm); only shards
  // cross between host and device (lower_gathers.h, lower_grads.h, updates.h).
  bool on_device = false;
  // By block: its partition is updated by the device optimizer (empty without one).
  std::vector<bool> device_update;

  size_t nb() const { return blocks.size(); }
  size_t es() const { return dtype_size(dt); }
  size_t acc_es() const { return dtype_size(acc); }
  std::string name(int64_t b) const {
    return b == layers ? std::string("shared") : "layer " + std::to_string(b);
  }
  int64_t numel(int64_t b) const { return parts.block(size_t(b)).numel; }
  int64_t shard(int64_t b) const { return parts.block(size_t(b)).shard_numel; }
  size_t padded_bytes(int64_t b) const { return static_cast<size_t>(shard(b) * ranks) * es(); }
  size_t shard_bytes(int64_t b) const { return static_cast<size_t>(shard(b)) * es(); }
  size_t acc_shard_bytes(int64_t b) const { return static_cast<size_t>(shard(b)) * acc_es(); }
  size_t block_bytes(int64_t b) const { return static_cast<size_t>(numel(b)) * es(); }
  // Stage 3's sharded blocks (not persistent).
  bool sharded(int64_t b) const { return stage == 3 && !parts.block(size_t(b)).persistent; }
  // A sharded block whose uses need a gather (all but a device shard of one rank).
  bool gathered(int64_t b) const {
    return sharded(b) && !(home[size_t(b)] == Home::kDevice && ranks == 1);
  }
  // A shard homed elsewhere than pinned memory passes through pinned staging after its update,
  // but where its new values stay on the device.
  bool transient(int64_t b) const {
    return sharded(b) && home[size_t(b)] != Home::kPinned && !new_params_on_device(b);
  }
  // The device optimizer's new parameters of block b need not cross to the host (stages 1-3): a
  // device-homed shard is updated in place; a block kept whole, with the collectives on the
  // device, gets the rank's new shard in its slot of the padded device copy all-gathered there.
  bool new_params_on_device(int64_t b) const {
    if (stage == 0 || device_update.empty() || !device_update[size_t(b)]) return false;
    return sharded(b) ? home[size_t(b)] == Home::kDevice : on_device;
  }
  // Block b's reduced gradient stays on the device for the device optimizer (the collectives on
  // the device): reduced, checked (Kernels::grad_stats), added up over micro-batches (stages
  // 2-3) and read by the update there; none of it crosses to the host.
  bool grads_on_device(int64_t b) const {
    return on_device && !device_update.empty() && device_update[size_t(b)];
  }
  // The index of block b's slot-`slot` gradient buffers.
  size_t at(int slot, int64_t b) const { return static_cast<size_t>(slot) * nb() + size_t(b); }
  // The suffix that names a slot's buffers and tasks ("" with one slot).
  std::string slot_name(int slot) const {
    return slots > 1 ? " (micro-batch " + std::to_string(slot) + ")" : std::string();
  }
};

// By block, the home of its 16-bit parameters (Layout::home; reads parts and stage). Below stage 3
// and for persistent blocks: kDevice. Stage 3: `offload_param`, but for the share
// `gpu_fraction` of the sharded blocks' elements whose shards stay on the device anyway
// (kDevice), chosen in forward order (shared block, layer 0, 1, ...: the shared block is used
// first and last), each block taken while the running total, counting half of it, stays within
// the share. offload_param kDevice: every shard on the device.
std::vector<Home> choose_homes(const Layout& lay, Home offload_param, double gpu_fraction);

}  // namespace strata::engine::zero
