// Lowering of the op list (ops.h) onto the compute lane, and the emission loop that interleaves
// everything the ops order: per op in order, the gathers it needs (and depth ahead), its task
// (zeroing its gradient first where it starts one, at stages 2-3), its checkpoints' accesses
// and moves, its dependencies (on updates, gathered copies, its gradients; delayed, the update
// that waits for its last read) and, where it completes a gradient, that gradient's chain.
//
// Takes the layout, the ops, the buffers, the other stages' lowerings (which it drives), the
// update's tasks and the runtime the tasks act on (the model, the batch).
#pragma once

#include "engine/zero/plan/builder.h"
#include "engine/zero/plan/host_buffers.h"
#include "engine/zero/plan/layout.h"
#include "engine/zero/plan/lower_checkpoints.h"
#include "engine/zero/plan/lower_gathers.h"
#include "engine/zero/plan/lower_grads.h"
#include "engine/zero/plan/op_buffers.h"
#include "engine/zero/plan/ops.h"
#include "engine/zero/plan/updates.h"
#include "engine/zero/runtime.h"

namespace strata::engine::zero {

// The lowerings the op emission drives.
struct OpDrivers {
  GatherLowering& gathers;
  CheckpointLowering& checkpoints;
  GradLowering& grads;
};

void lower_ops(PlanBuilder& pb, const Layout& lay, const OpList& ops, const OpBuffers& ob,
               const HostBuffers& hb, const UpdateTasks& updates, OpDrivers drivers, Runtime* rt);

}  // namespace strata::engine::zero
