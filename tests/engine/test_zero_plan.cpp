// The ZeRO plan compiler's pure stages (src/engine/zero/plan/): the op list of both micro-batch
// orders against lists written out by hand from the order DESIGN.md §4 and ops.h state, the
// gradient roles of every op counted against the rules, the gather spans and the checkpoint
// moves of a small model.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/zero/plan/checkpoints.h"
#include "engine/zero/plan/gathers.h"
#include "engine/zero/plan/ops.h"

namespace strata::engine::zero {
namespace {

// Three layers in segments {0}, {1, 2}; block 3 is the shared one.
OpInput small(int stage, int micros, bool device_sum, bool sharded) {
  OpInput in;
  in.layers = 3;
  in.segments = {{0, 1}, {1, 3}};
  in.forward_flops = {1, 2, 3, 10};
  in.backward_flops = {2, 4, 6, 20};
  in.stage = stage;
  in.micros = micros;
  in.device_sum = device_sum;
  in.sharded.assign(4, sharded);
  return in;
}

std::vector<std::string> names(const OpList& l) {
  std::vector<std::string> v;
  for (const Op& op : l.ops) v.push_back(op.name);
  return v;
}

TEST(ZeroPlanOps, OneMicroBatchIsTheTextbookOrder) {
  const OpList l = make_ops(small(0, 1, true, false));
  const std::vector<std::string> want{
      "zero grads",  "set batch",    "embedding forward",  "forward 0",         "forward 1",
      "forward 2",   "head forward", "head backward",      "backward 2",        "backward 1",
      "recompute 0", "backward 0",   "embedding backward", "fold head gradient"};
  EXPECT_EQ(names(l), want);
  EXPECT_EQ(l.slots, 1);
  // Last reads: each layer's backward, the shared block's head backward.
  EXPECT_EQ(l.last_read, (std::vector<size_t>{11, 9, 8, 7}));
}

TEST(ZeroPlanOps, SegmentMajorRunsEveryMicroBatchThroughASegment) {
  const OpList l = make_ops(small(3, 2, false, true));
  auto mb = [](const std::string& n, int k) {
    return n + " (micro-batch " + std::to_string(k) + ")";
  };
  const std::vector<std::string> want{
      "zero grads", mb("set batch", 0), mb("embedding forward", 0), mb("set batch", 1),
      mb("embedding forward", 1),
      // segment 0, micro-batches last to first; then segment 1
      mb("forward 0", 1), mb("forward 0", 0), mb("forward 1", 1), mb("forward 2", 1),
      mb("forward 1", 0), mb("forward 2", 0), mb("head forward", 0), mb("head backward", 0),
      mb("head forward", 1), mb("head backward", 1),
      // last segment: micro-batch 0 not recomputed, 1 recomputed
      mb("backward 2", 0), mb("backward 1", 0), mb("recompute 1", 1), mb("recompute 2", 1),
      mb("backward 2", 1), mb("backward 1", 1), mb("recompute 0", 0), mb("backward 0", 0),
      mb("recompute 0", 1), mb("backward 0", 1), mb("embedding backward", 0),
      mb("embedding backward", 1)};
  EXPECT_EQ(names(l), want);
  EXPECT_EQ(l.slots, 2);
}

// Per (block, slot): exactly one op completes the gradient; at stages 2-3 exactly one zeroes it
// and comes first; every other writer adds.
TEST(ZeroPlanOps, EveryGradientSlotIsZeroedOnceAndCompletedOnce) {
  for (int stage : {0, 1, 2, 3}) {
    for (int micros : {1, 2, 3}) {
      for (bool sum : {false, true}) {
        const bool device_sum = stage <= 1 || (micros > 1 && sum);
        const OpList l = make_ops(small(stage, micros, device_sum, stage == 3));
        std::map<std::pair<int64_t, int>, int> zeroed, completed, writers;
        std::map<std::pair<int64_t, int>, size_t> first_writer, zero_at;
        for (size_t i = 0; i < l.ops.size(); ++i) {
          const Op& op = l.ops[i];
          const bool writes = op.kind == OpKind::kHeadBackward ||
                              op.kind == OpKind::kLayerBackward ||
                              op.kind == OpKind::kEmbeddingBackward;
          const std::pair<int64_t, int> key{op.block, op.slot};
          if (writes && !first_writer.count(key)) first_writer[key] = i;
          if (op.zero_grad >= 0) {
            ++zeroed[{op.zero_grad, op.slot}];
            zero_at[{op.zero_grad, op.slot}] = i;
          }
          if (op.grad_done >= 0) ++completed[{op.grad_done, op.slot}];
          if (writes && stage >= 2) {
            EXPECT_EQ(
                (op.zero_grad >= 0) + (op.adds_grad >= 0) + (op.grad_done >= 0 && op.zero_grad < 0),
                1)
                << op.name << " stage " << stage;
          }
        }
        const int slots = device_sum ? 1 : micros;
        EXPECT_EQ(l.slots, slots);
        for (int64_t b = 0; b < 4; ++b) {
          for (int s = 0; s < slots; ++s) {
            const std::string where = "block " + std::to_string(b) + " slot " + std::to_string(s) +
                                      " stage " + std::to_string(stage) + " micros " +
                                      std::to_string(micros);
            EXPECT_EQ((completed[{b, s}]), 1) << where;
            EXPECT_EQ((zeroed[{b, s}]), stage >= 2 ? 1 : 0) << where;
            if (stage >= 2) {
              EXPECT_EQ((zero_at[{b, s}]), (first_writer[{b, s}])) << where;
            }
          }
        }
      }
    }
  }
}

TEST(ZeroPlanGathers, OneGatherPerBlockAndPhaseSpanningItsUses) {
  const OpList l = make_ops(small(3, 1, false, true));
  std::vector<bool> gathered{true, true, true, true};
  const std::vector<Gather> g = schedule_gathers(l.ops, gathered);
  // Order of first use: shared (forward: embedding to head backward), layers 0-2 forward, then
  // the backward copies of 2, 1 (backward only: the last segment is not recomputed), 0.
  ASSERT_EQ(g.size(), 7u);
  const std::vector<std::pair<int64_t, int>> order{{3, 0}, {0, 0}, {1, 0}, {2, 0},
                                                   {2, 1}, {1, 1}, {0, 1}};
  for (size_t k = 0; k < g.size(); ++k) {
    EXPECT_EQ(g[k].block, order[k].first);
    EXPECT_EQ(g[k].phase, order[k].second);
  }
  EXPECT_EQ(g[0].first, 2u);   // embedding forward
  EXPECT_EQ(g[0].last, 7u);    // head backward
  EXPECT_EQ(g[6].first, 10u);  // recompute 0
  EXPECT_EQ(g[6].last, 11u);   // backward 0
  // A block whose shard is used in place has no gather.
  gathered[1] = false;
  EXPECT_EQ(find_gather(schedule_gathers(l.ops, gathered), 1, 0), 5u);
}

TEST(ZeroPlanCheckpoints, TheMovesOfSegmentZero) {
  const OpList l = make_ops(small(2, 2, false, false));
  const std::vector<CheckpointMove> m = plan_checkpoint_moves(l.ops, {0, 1}, 1, 2, 3);
  ASSERT_EQ(m.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const CheckpointMove& c = m[size_t(k)];
    const std::string mk = " (micro-batch " + std::to_string(k) + ")";
    EXPECT_EQ(c.name, "checkpoint 0" + mk);
    EXPECT_EQ(l.ops[c.writer].name, "embedding forward" + mk);
    EXPECT_EQ(l.ops[c.reader].name, "forward 0" + mk);
    // Segment 1 is the last: the checkpoint comes up after the head backward.
    EXPECT_EQ(l.ops[c.trigger].name, "head backward" + mk);
    EXPECT_EQ(l.ops[c.recompute].name, "recompute 0" + mk);
    EXPECT_EQ(l.ops[c.backward].name, "backward 0" + mk);
  }
}

}  // namespace
}  // namespace strata::engine::zero
