// The single-rank offloaded training step (DESIGN.md §4 without ZeRO partitioning): the model
// resident on the device, the fp32 master weights and Adam moments in an OffloadedOptimizer
// (host RAM and/or NVMe). Two implementations with the same results, bit for bit:
//   SerialStep (serial_step.h):   forward, backward, every gradient down, the global norm, the
//                                 whole optimizer, every parameter up; one thing at a time.
//   PlannedStep (planned_step.h): the same step as a scheduler plan, replayed every step, with
//                                 transfers and the CPU optimizer overlapping compute.
//
// Optimizer partitions are the model's blocks in backward order (partition_blocks): the last
// layer first, the shared block (embeddings, final layernorm) last, so that the NVMe share of the
// state (the first partitions) belongs to the blocks whose gradients are ready first.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/gpt.h"

namespace strata::engine {

struct OffloadStepOptions {
  float grad_clip = 1.0f;  // clip the global gradient norm to this; 0 = off
};

struct StepResult {
  float loss = 0.0f;       // mean cross-entropy of the micro-batch
  double grad_norm = 0.0;  // global L2 norm of the gradients (before clipping)
};

// partition p -> model block: L-1, L-2, ..., 0, then L (the shared block).
std::vector<int64_t> partition_blocks(const model::GptModel& model);

// The clip coefficient for a global norm (1 when clipping is off or the norm is within bounds).
float clip_coefficient(float grad_clip, double norm);

// The error for a non-finite gradient at `step` (shared wording of both steps).
Status nonfinite_gradient_error(int64_t step);

}  // namespace strata::engine
