#include "engine/zero/plan/host_buffers.h"

#include <algorithm>

namespace strata::engine::zero {

HostBuffers lower_host_buffers(PlanBuilder& pb, const Layout& lay, uint64_t bucket_bytes) {
  using sched::Tier;
  const size_t nb = lay.nb();
  const int stage = lay.stage;
  HostBuffers h;
  // A gradient's pinned landing place: whole and padded, but at stages 2-3 with the
  // collectives on the device only the reduced shard comes down.
  auto landing = [&](int64_t b) {
    return lay.on_device && stage >= 2 ? lay.shard_bytes(b) : lay.padded_bytes(b);
  };
  h.gfull.assign(size_t(lay.slots) * nb, -1);
  h.gshard.assign(nb, -1);
  h.pbuf.assign(nb, -1);
  h.dshard.assign(nb, -1);
  h.dgrad.assign(nb, -1);
  // A stage-3 shard's home on the device.
  auto device_home = [&](int64_t b) {
    h.dshard[size_t(b)] =
        pb.add_buffer(BufferKind::kHome, "param shard " + lay.name(b) + " (device)", Tier::kDevice,
                      lay.shard_bytes(b), /*initially_valid=*/true);
    h.device_homes += round_device(lay.shard_bytes(b));
  };
  for (size_t b = 0; b < nb; ++b) {
    const int64_t bb = int64_t(b);
    h.largest = std::max<uint64_t>(h.largest, lay.padded_bytes(bb));
    if (lay.grads_on_device(bb)) {
      if (stage >= 1) {
        const uint64_t bytes = stage == 1 ? lay.shard_bytes(bb) : lay.acc_shard_bytes(bb);
        h.dgrad[b] = pb.add_buffer(BufferKind::kHome, "grad shard " + lay.name(bb) + " (device)",
                                   Tier::kDevice, bytes, /*initially_valid=*/true);
        h.device_grads += round_device(bytes);
      }
    } else {
      h.gfull[b] = pb.add_buffer(stage <= 1 ? BufferKind::kGradWhole : BufferKind::kGradBucket,
                                 "grad " + lay.name(bb), Tier::kPinnedHost, landing(bb),
                                 /*initially_valid=*/stage <= 1);
      if (stage >= 2) {
        h.gshard[b] = pb.add_buffer(BufferKind::kHome, "grad shard " + lay.name(bb),
                                    Tier::kPinnedHost, lay.acc_shard_bytes(bb),
                                    /*initially_valid=*/true);
        h.pinned += round_page(lay.acc_shard_bytes(bb));
      } else {
        h.pinned += round_page(lay.padded_bytes(bb));
      }
    }
    const bool sharded = lay.sharded(bb);
    if (lay.new_params_on_device(bb)) {  // no host copy of its parameters
      if (sharded) device_home(bb);
      continue;
    }
    if (lay.transient(bb)) {
      h.pbuf[b] = pb.add_buffer(BufferKind::kParamStaging, "new param shard " + lay.name(bb),
                                Tier::kPinnedHost, lay.shard_bytes(bb));
      h.largest_moving = std::max<uint64_t>(h.largest_moving, round_page(lay.shard_bytes(bb)));
      if (lay.home[b] == Home::kNvme) {
        h.largest_nvme = std::max<uint64_t>(h.largest_nvme, round_page(lay.shard_bytes(bb)));
      }
      if (lay.home[b] == Home::kDevice) device_home(bb);
      continue;
    }
    h.pbuf[b] =
        pb.add_buffer(sharded ? BufferKind::kHome : BufferKind::kParamStaging,
                      sharded ? "param shard " + lay.name(bb) : "params " + lay.name(bb),
                      Tier::kPinnedHost, sharded ? lay.shard_bytes(bb) : lay.padded_bytes(bb),
                      /*initially_valid=*/sharded);
    h.pinned += round_page(sharded ? lay.shard_bytes(bb) : lay.padded_bytes(bb));
  }
  // The other slots' gradients (segment-major at stages 2-3), after every block's first.
  for (int slot = 1; slot < lay.slots; ++slot) {
    for (size_t b = 0; b < nb; ++b) {
      if (lay.grads_on_device(int64_t(b))) continue;
      h.gfull[lay.at(slot, int64_t(b))] = pb.add_buffer(
          BufferKind::kGradBucket, "grad " + lay.name(int64_t(b)) + lay.slot_name(slot),
          Tier::kPinnedHost, landing(int64_t(b)));
    }
  }
  bool kept = false;
  for (size_t b = 0; b < nb; ++b) kept = kept || lay.grads_on_device(int64_t(b));
  if (kept) {  // the statistics of the gradients kept on the device, on their way to the host
    const uint64_t bytes = uint64_t(lay.ranks) * nb * 2 * sizeof(double);
    h.dstats = pb.add_buffer(BufferKind::kHome, "gradient statistics (device)", Tier::kDevice,
                             bytes, /*initially_valid=*/true);
    h.hstats = pb.add_buffer(BufferKind::kHome, "gradient statistics", Tier::kPinnedHost, bytes,
                             /*initially_valid=*/true);
    h.device_grads += round_device(bytes);
    h.pinned += round_page(bytes);
  }
  if (stage >= 2) {
    const uint64_t bucket = bucket_bytes == 0 ? 2 * h.largest : bucket_bytes;
    h.in_flight += std::max<uint64_t>(bucket, round_page(h.largest));
  }
  return h;
}

}  // namespace strata::engine::zero
