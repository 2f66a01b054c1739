// Lowering, the device buffers the compute ops use besides the model's own: per block its
// gradient at stages 2-3 (one per gradient slot; the model keeps the gradients at stages 0-1),
// and at stage 3 the gathered copies of each gathered block (forward and backward phase, each
// on the device and its pinned landing place for the all-gather). Takes the layout.
#pragma once

#include <array>
#include <vector>

#include "engine/zero/plan/builder.h"
#include "engine/zero/plan/layout.h"

namespace strata::engine::zero {

struct OpBuffers {
  std::vector<sched::BufferId> dgrad;  // by Layout::at(slot, block) (-1: the model's)
  // By phase, then block (-1: not gathered).
  std::array<std::vector<sched::BufferId>, 2> gathered_dev, gathered_host;
};

OpBuffers lower_op_buffers(PlanBuilder& pb, const Layout& lay);

}  // namespace strata::engine::zero
