// Stage 1 of the ZeRO plan compiler (DESIGN.md §4): the compute ops of one step, in the order the
// compute lane runs them, as data. Takes the model's shape (layers, checkpoint segments, costs),
// the ZeRO stage, the micro-batch order and which blocks are sharded; returns the op list with,
// per op, the gathered copies it uses and the gradient it starts, adds to or completes. Nothing
// here knows buffers, lanes or tasks: the lowering (lower_ops.h) turns each op into a task
// that calls the model.
//
// One generator for both micro-batch orders. micros = K >= 2 is the segment-major order: every
// micro-batch through a checkpoint segment before the next segment (each op names its
// micro-batch, " (micro-batch k)"); micros = 1 is the one-micro-batch list that the
// micro-batch-major order replays once per micro-batch.
//   forward:  every micro-batch's embedding (set batch first), then segment by segment every
//             micro-batch, from the last to the first (so the first micro-batch's activations of
//             the last segment are resident when the backward starts);
//   heads:    per micro-batch in order, forward then backward;
//   backward: segment by segment in reverse, within a segment micro-batch by micro-batch in
//             order, each recomputed first but micro-batch 0's last segment; then every
//             embedding backward in order; then, where the micro-batches' gradients add up on
//             the device, "fold head gradient" (Model::fold_head_grads).
// Gradients (Op::zero_grad / adds_grad / grad_done, of gradient slot Op::slot): with
// device_sum (stages 0-1, or device_grad_sum) every micro-batch adds into one buffer per block,
// zeroed (stages 2-3) by micro-batch 0's first writer and complete after micro-batch K-1's last
// (the shared block's after the fold); without it each micro-batch's gradient of a block is a
// slot of its own (slot = its micro-batch), zeroed by its first writer, complete after its last.
// At stages 0-1 the model's gradients are zeroed by "zero grads" (first in the list), not per op.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/plan.h"

namespace strata::engine::zero {

// What an op asks of the model (model::Model's step functions).
enum class OpKind : uint8_t {
  kZeroGrads,          // stages 0-1: the model's gradients zeroed (first micro-batch)
  kSetBatch,           // the micro-batch's tokens and targets
  kEmbeddingForward,   // reads the shared block
  kLayerForward,       // layer `block`
  kHeadForward,        // reads the shared block
  kHeadBackward,       // reads the shared block, writes its gradient
  kLayerRecompute,     // layer `block` from its segment's checkpoint
  kLayerBackward,      // layer `block`
  kEmbeddingBackward,  // writes the shared block's gradient (reads no parameter)
  kFoldHeadGradient,   // a tied head's gradient, kept apart, joins the embedding's
};

struct Op {
  OpKind kind = OpKind::kZeroGrads;
  int64_t block = -1;  // the layer (layer ops), the shared block (embedding and head ops)
  int micro = -1;      // the micro-batch it acts on (-1: zero grads and the fold)
  std::string name;    // "forward 3", "head backward (micro-batch 1)"
  // The gathered copies it reads: (block, phase), phase 0 the forward copy, 1 the backward one.
  std::vector<std::pair<int64_t, int>> uses;
  int64_t first_use_of = -1;  // a block whose update it must see (its first use in the step)
  int slot = 0;               // the gradient slot of the three below
  int64_t zero_grad = -1;     // stages 2-3: zeroes that block's gradient, then writes it
  int64_t adds_grad = -1;     // stages 2-3: adds into it, neither zeroing nor completing it
  int64_t grad_done = -1;     // the block's gradient (of `slot`) is complete after it
  sched::Work work = sched::Work::kFlops;  // its compute, for the cost model
  double flops = 0.0;
};

struct OpInput {
  int64_t layers = 0;  // the shared block is block `layers`
  // Checkpoint segments: [begin, end) layers each, in order.
  std::vector<std::pair<int64_t, int64_t>> segments;
  std::vector<double> forward_flops, backward_flops;  // by block (model::BlockCost)
  int stage = 0;
  int micros = 1;             // K: 1, or the segment-major order's micro-batches
  bool device_sum = false;    // the micro-batches' gradients add up on the device (above)
  std::vector<bool> sharded;  // by block: its uses read a gathered copy (stage 3)
};

struct OpList {
  std::vector<Op> ops;
  std::vector<size_t> last_read;  // by block: the op that reads its parameters last
  int micros = 1;                 // OpInput::micros
  int slots = 1;                  // gradient slots (K without device_sum at stages 2-3)
};

OpList make_ops(const OpInput& in);

// The index of the op of `kind` on `block` for micro-batch `micro` (it must exist).
size_t find_op(const std::vector<Op>& ops, OpKind kind, int64_t block, int micro);

}  // namespace strata::engine::zero
