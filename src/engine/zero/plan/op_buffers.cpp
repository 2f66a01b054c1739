#include "engine/zero/plan/op_buffers.h"

#include <string>

namespace strata::engine::zero {

OpBuffers lower_op_buffers(PlanBuilder& pb, const Layout& lay) {
  using sched::Tier;
  const size_t nb = lay.nb();
  OpBuffers o;
  for (auto* v :
       {&o.gathered_dev[0], &o.gathered_dev[1], &o.gathered_host[0], &o.gathered_host[1]}) {
    v->assign(nb, -1);
  }
  o.dgrad.assign(size_t(lay.slots) * nb, -1);
  o.dbucket.assign(nb, -1);
  const bool dev = lay.on_device;
  // What the device collectives act on is padded.
  auto device_bytes = [&](int64_t b) { return dev ? lay.padded_bytes(b) : lay.block_bytes(b); };
  for (size_t b = 0; b < nb; ++b) {
    const int64_t bb = int64_t(b);
    if (lay.stage >= 2) {
      o.dgrad[b] = pb.add_buffer(BufferKind::kGradBucket, "grad " + lay.name(bb) + " (device)",
                                 Tier::kDevice, device_bytes(bb));
    }
    if (dev && lay.stage <= 1) {
      o.dbucket[b] = pb.add_buffer(BufferKind::kGradBucket, "grad bucket " + lay.name(bb),
                                   Tier::kDevice, lay.padded_bytes(bb));
    }
    if (!lay.gathered(bb)) continue;
    for (int ph = 0; ph < 2; ++ph) {
      const std::string suffix = ph == 0 ? " (forward)" : " (backward)";
      if (!dev) {
        o.gathered_host[ph][b] =
            pb.add_buffer(BufferKind::kGathered, "gathered " + lay.name(bb) + suffix,
                          Tier::kPinnedHost, lay.padded_bytes(bb));
      }
      o.gathered_dev[ph][b] =
          pb.add_buffer(BufferKind::kGathered, "gathered " + lay.name(bb) + suffix + " (device)",
                        Tier::kDevice, device_bytes(bb));
    }
  }
  for (int slot = 1; slot < lay.slots; ++slot) {  // the other micro-batches' (segment-major)
    for (size_t b = 0; b < nb; ++b) {
      const int64_t bb = int64_t(b);
      o.dgrad[lay.at(slot, bb)] = pb.add_buffer(
          BufferKind::kGradBucket, "grad " + lay.name(bb) + lay.slot_name(slot) + " (device)",
          Tier::kDevice, device_bytes(bb));
    }
  }
  return o;
}

}  // namespace strata::engine::zero
