// Lowering, the device buffers the compute ops use besides the model's own: per block its
// gradient at stages 2-3 (one per gradient slot; the model keeps the gradients at stages 0-1),
// and at stage 3 the gathered copies of each gathered block (forward and backward phase, each
// on the device and its pinned landing place for the all-gather). With the collectives on the
// device (Layout::on_device) the device buffers that collectives act on are padded (the comm
// layer's padding rule), the gathered copies have no pinned landing place, and at stages 0-1
// each block's gradient is reduced in a padded device bucket of its own. Takes the layout.
#pragma once

#include <array>
#include <vector>

#include "engine/zero/plan/builder.h"
#include "engine/zero/plan/layout.h"

namespace strata::engine::zero {

struct OpBuffers {
  std::vector<sched::BufferId> dgrad;  // by Layout::at(slot, block) (-1: the model's)
  // By block, stages 0-1 with the collectives on the device: the padded bucket the model's
  // gradient is reduced in (-1: none).
  std::vector<sched::BufferId> dbucket;
  // By phase, then block (-1: not gathered).
  std::array<std::vector<sched::BufferId>, 2> gathered_dev, gathered_host;
};

OpBuffers lower_op_buffers(PlanBuilder& pb, const Layout& lay);

}  // namespace strata::engine::zero
