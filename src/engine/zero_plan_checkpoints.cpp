// ZeroStep::build_plan, the offloaded activation checkpoints (--offload-activations): their
// buffers, which ops write and read them, and their moves down (and to NVMe) and back up.
#include <algorithm>
#include <string>

#include "core/check.h"
#include "engine/zero_plan_build.h"

namespace strata::engine {

using sched::BufferId;
using sched::Lane;
using sched::TaskContext;
using sched::TaskId;
using sched::Tier;

size_t ZeroStep::PlanBuild::op_index(const std::string& op_name) const {
  size_t i = 0;
  while (i < ops.size() && ops[i].name != op_name) ++i;
  STRATA_CHECK(i < ops.size(), "ZeRO plan: no op " + op_name);
  return i;
}

// Offloaded activation checkpoints (segments [0, S-1)), one per (segment, micro-batch) in the
// segment-major order (index k * S' + s, S' = S - 1 offloaded segments; one micro-batch
// otherwise). Segment s's kept input is written into a device buffer by the layer before it (the
// embedding for s = 0), goes down after the next layer's forward has read it (and on to NVMe),
// and comes back into another device buffer one segment ahead: after the first op of segment
// s+1's backward (its recompute, or the head backward for the last segment), for the recompute
// and the backward of its first layer.
void ZeroStep::plan_checkpoints(PlanBuild& pb) {
  const model::Model& m = model_;
  pb.nseg = offloaded_segments();
  pb.act_home = options_.offload_activations;
  pb.cb = m.checkpoint_bytes();
  const int64_t nseg = pb.nseg;
  const int micros = std::max(1, options_.layer_major_micros);
  const size_t cb = pb.cb;
  const size_t nops = pb.ops.size();
  const size_t count = size_t(nseg) * size_t(micros);
  pb.ck_uses.assign(nops, {});
  pb.ck_down_after.assign(nops, {});
  pb.ck_up_after.assign(nops, {});
  pb.ck_up.assign(count, -1);
  pb.ck_stored.assign(count, -1);
  for (int k = 0; k < micros; ++k) {
    const std::string mk = micros > 1 ? " (micro-batch " + std::to_string(k) + ")" : "";
    auto op = [&](const std::string& name) { return pb.op_index(name + mk); };
    for (int64_t s = 0; s < nseg; ++s) {
      const std::string n = "checkpoint " + std::to_string(s) + mk;
      pb.ck_name.push_back(n);
      pb.ck_seg.push_back(s);
      pb.ckf.push_back(pb.add_buffer(Kind::kCheckpoint, n + " (forward)", Tier::kDevice, cb));
      pb.ckb.push_back(pb.add_buffer(Kind::kCheckpoint, n + " (backward)", Tier::kDevice, cb));
      pb.ckh.push_back(pb.add_buffer(Kind::kCheckpoint,
                                     n + (pb.act_home == Home::kNvme ? " (to NVMe)" : ""),
                                     Tier::kPinnedHost, cb));
      pb.ckr.push_back(
          pb.act_home == Home::kNvme
              ? pb.add_buffer(Kind::kCheckpoint, n + " (from NVMe)", Tier::kPinnedHost, cb)
              : -1);
      const int64_t first = m.segment_begin(s);
      const size_t w =
          s == 0 ? op("embedding forward") : op("forward " + std::to_string(first - 1));
      const size_t trigger = s + 2 == m.num_segments()
                                 ? op("head backward")
                                 : op("recompute " + std::to_string(m.segment_begin(s + 1)));
      pb.ck_writer.push_back(w);
      const int64_t c = int64_t(k) * nseg + s;
      const auto uc = size_t(c);
      pb.ck_uses[w].push_back({s, c, pb.ckf[uc], true, false});
      pb.ck_uses[op("forward " + std::to_string(first))].push_back(
          {s, c, pb.ckf[uc], false, false});
      pb.ck_uses[op("recompute " + std::to_string(first))].push_back(
          {s, c, pb.ckb[uc], false, false});
      pb.ck_uses[op("backward " + std::to_string(first))].push_back(
          {s, c, pb.ckb[uc], false, true});
      pb.ck_down_after[op("forward " + std::to_string(first))].push_back(c);
      pb.ck_up_after[trigger].push_back(c);
    }
  }
}

// After op i (task t): the checkpoints it was the last forward reader of go down (and to NVMe);
// those wanted one segment ahead of it come back.
void ZeroStep::emit_checkpoint_moves(PlanBuild& pb, size_t i, TaskId t) {
  sched::Plan& plan = pb.plan;
  const Home act_home = pb.act_home;
  const size_t cb = pb.cb;
  for (int64_t ck : pb.ck_down_after[i]) {
    const auto us = size_t(ck);
    const BufferId f = pb.ckf[us], h = pb.ckh[us];
    const TaskId down = plan.add(pb.ck_name[us] + " down", Lane::kD2H,
                                 [this, f, h, cb](const TaskContext& c) -> Status {
                                   if (c.args<Replay>().flushing) return ok_status();
                                   moved(kD2H, cb);
                                   return c.stream->copy(c.buffer(h), c.buffer(f), cb,
                                                         gpu::CopyKind::kDeviceToHost);
                                 },
                                 {pb.op_task[pb.ck_writer[us]], t});
    pb.work(down, sched::Work::kD2HBytes, double(cb));
    plan.acquire(down, h);
    plan.reads(down, f);
    plan.release(down, f);
    plan.writes(down, h);
    pb.ck_stored[us] = down;
    if (act_home != Home::kNvme) continue;
    pb.ck_stored[us] =
        plan.add("write " + pb.ck_name[us], Lane::kNvme,
                 [this, h, ck, cb](const TaskContext& c) -> Status {
                   if (c.args<Replay>().flushing) return ok_status();
                   moved(kNvmeWrite, cb);
                   return options_.swap_store->write(checkpoint_key(ck), c.buffer(h), cb).wait();
                 },
                 {down});
    pb.nvme_work(pb.ck_stored[us], sched::Work::kNvmeWriteBytes, double(cb));
    plan.reads(pb.ck_stored[us], h);
    plan.release(pb.ck_stored[us], h);
  }
  for (int64_t ck : pb.ck_up_after[i]) {
    const auto us = size_t(ck);
    BufferId src = pb.ckh[us];
    TaskId prev = pb.ck_stored[us];
    if (act_home == Home::kNvme) {
      src = pb.ckr[us];
      prev =
          plan.add("read " + pb.ck_name[us], Lane::kNvme,
                   [this, src, ck, cb](const TaskContext& c) -> Status {
                     if (c.args<Replay>().flushing) return ok_status();
                     moved(kNvmeRead, cb);
                     return options_.swap_store->read(checkpoint_key(ck), c.buffer(src), cb).wait();
                   },
                   {prev, t});
      pb.nvme_work(prev, sched::Work::kNvmeReadBytes, double(cb));
      plan.acquire(prev, src);
      plan.writes(prev, src);
    }
    const BufferId d = pb.ckb[us];
    pb.ck_up[us] = plan.add(pb.ck_name[us] + " up", Lane::kH2D,
                            [this, src, d, cb](const TaskContext& c) -> Status {
                              if (c.args<Replay>().flushing) return ok_status();
                              moved(kH2D, cb);
                              return c.stream->copy(c.buffer(d), c.buffer(src), cb,
                                                    gpu::CopyKind::kHostToDevice);
                            },
                            {prev, t});
    pb.work(pb.ck_up[us], sched::Work::kH2DBytes, double(cb));
    plan.reads(pb.ck_up[us], src);
    plan.release(pb.ck_up[us], src);
    plan.acquire(pb.ck_up[us], d);
    plan.writes(pb.ck_up[us], d);
  }
}

}  // namespace strata::engine
