// The ZeRO plan compiler (DESIGN.md §4): the step as one scheduler plan, built once and replayed
// every step. Its stages, each a function or a lowering object of its own file that takes what
// it reads and returns what it made:
//   1 ops.h          the compute ops of a step, for the micro-batch order (data)
//   2 gathers.h      the stage-3 gather schedule (data)
//   3 checkpoints.h  the offloaded checkpoints' moves (data)
//   4 lower_grads.h  the gradient chains: down, reduce, check; the norm
//   5 updates.h      the update tasks: NVMe state, Adam (host or device), new parameters' way
//   6 the lowering onto lanes and buffers: host_buffers.h and op_buffers.h (the buffers),
//     lower_gathers.h and lower_checkpoints.h (their tasks), lower_ops.h (the op tasks and the
//     emission loop that drives 4 and the gathers' and checkpoints' lowerings), budgets.h.
// compile() calls them in order (the order fixes the plan's task and buffer numbering) and
// finalizes the plan under its budgets.
//
// Thread safety: none needed (one call builds one plan). The plan's tasks capture `rt`.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/zero/plan/builder.h"
#include "engine/zero/plan/host_buffers.h"
#include "engine/zero/plan/layout.h"
#include "engine/zero/plan/ops.h"
#include "engine/zero/runtime.h"

namespace strata::engine::zero {

struct CompileInput {
  const Layout* layout = nullptr;
  Runtime* rt = nullptr;  // what the tasks act on (the optimizer's partitions read here too)
  OpInput ops;            // stage 1's input
  // The offloaded checkpoints: segments (0: none), home, bytes of one.
  int64_t offloaded_segments = 0;
  Home checkpoint_home = Home::kDevice;
  size_t checkpoint_bytes = 0;
  int64_t checkpoint_interval = 0;  // layers per checkpoint segment (the device budget)
  size_t depth = 2;                 // prefetch_depth
  int staging_slots = 3;            // ZeroStepOptions::staging_slots
  uint64_t bucket_bytes = 0;        // ZeroStepOptions::bucket_bytes
};

// The finalized plan with what the step's reports need of it (builder.h), and the buffers the
// step reads outside its replays (the stage-3 shards' homes: HostBuffers::pbuf, dshard).
struct Compiled {
  PlanBuilder built;
  HostBuffers host;
};

Result<Compiled> compile(const CompileInput& in);

}  // namespace strata::engine::zero
