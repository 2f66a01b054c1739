// ZeroStep::build_plan, the offloaded activation checkpoints (--offload-activations): their
// buffers, which ops write and read them, and their moves down (and to NVMe) and back up.
#include <algorithm>
#include <string>

#include "engine/zero_plan_build.h"

namespace strata::engine {

using sched::BufferId;
using sched::Lane;
using sched::TaskContext;
using sched::TaskId;
using sched::Tier;

// The offloaded checkpoints' moves (stage 3, zero/plan/checkpoints.h): per checkpoint its
// device buffers (forward and backward copies) and pinned ones (the copy down; from NVMe), and
// per op the checkpoints it touches and those that move after it.
void ZeroStep::plan_checkpoints(PlanBuild& pb) {
  const model::Model& m = rt_->model;
  pb.nseg = offloaded_segments();
  pb.act_home = options_.offload_activations;
  pb.cb = m.checkpoint_bytes();
  std::vector<int64_t> begin;
  for (int64_t s = 0; s < m.num_segments(); ++s) begin.push_back(m.segment_begin(s));
  pb.ck_moves = zero::plan_checkpoint_moves(pb.ops.ops, begin, pb.nseg, pb.ops.micros, pb.layers);
  const size_t nops = pb.ops.ops.size();
  pb.ck_uses.assign(nops, {});
  pb.ck_down_after.assign(nops, {});
  pb.ck_up_after.assign(nops, {});
  pb.ck_up.assign(pb.ck_moves.size(), -1);
  pb.ck_stored.assign(pb.ck_moves.size(), -1);
  const size_t cb = pb.cb;
  for (size_t c = 0; c < pb.ck_moves.size(); ++c) {
    const zero::CheckpointMove& mv = pb.ck_moves[c];
    const std::string& n = mv.name;
    pb.ckf.push_back(pb.add_buffer(Kind::kCheckpoint, n + " (forward)", Tier::kDevice, cb));
    pb.ckb.push_back(pb.add_buffer(Kind::kCheckpoint, n + " (backward)", Tier::kDevice, cb));
    pb.ckh.push_back(pb.add_buffer(Kind::kCheckpoint,
                                   n + (pb.act_home == Home::kNvme ? " (to NVMe)" : ""),
                                   Tier::kPinnedHost, cb));
    pb.ckr.push_back(
        pb.act_home == Home::kNvme
            ? pb.add_buffer(Kind::kCheckpoint, n + " (from NVMe)", Tier::kPinnedHost, cb)
            : -1);
    const int64_t s = mv.seg, ck = int64_t(c);
    pb.ck_uses[mv.writer].push_back({s, ck, pb.ckf[c], true, false});
    pb.ck_uses[mv.reader].push_back({s, ck, pb.ckf[c], false, false});
    pb.ck_uses[mv.recompute].push_back({s, ck, pb.ckb[c], false, false});
    pb.ck_uses[mv.backward].push_back({s, ck, pb.ckb[c], false, true});
    pb.ck_down_after[mv.reader].push_back(ck);
    pb.ck_up_after[mv.trigger].push_back(ck);
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
    const TaskId down = plan.add(pb.ck_moves[us].name + " down", Lane::kD2H,
                                 [rt = rt_.get(), f, h, cb](const TaskContext& c) -> Status {
                                   if (c.args<zero::Replay>().flushing) return ok_status();
                                   rt->moved(zero::Moved::kD2H, cb);
                                   return c.stream->copy(c.buffer(h), c.buffer(f), cb,
                                                         gpu::CopyKind::kDeviceToHost);
                                 },
                                 {pb.op_task[pb.ck_moves[us].writer], t});
    pb.work(down, sched::Work::kD2HBytes, double(cb));
    plan.acquire(down, h);
    plan.reads(down, f);
    plan.release(down, f);
    plan.writes(down, h);
    pb.ck_stored[us] = down;
    if (act_home != Home::kNvme) continue;
    pb.ck_stored[us] =
        plan.add("write " + pb.ck_moves[us].name, Lane::kNvme,
                 [rt = rt_.get(), h, ck, cb](const TaskContext& c) -> Status {
                   if (c.args<zero::Replay>().flushing) return ok_status();
                   rt->moved(zero::Moved::kNvmeWrite, cb);
                   return rt->swap.store->write(rt->swap.checkpoint(ck), c.buffer(h), cb).wait();
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
          plan.add("read " + pb.ck_moves[us].name, Lane::kNvme,
                   [rt = rt_.get(), src, ck, cb](const TaskContext& c) -> Status {
                     if (c.args<zero::Replay>().flushing) return ok_status();
                     rt->moved(zero::Moved::kNvmeRead, cb);
                     return rt->swap.store->read(rt->swap.checkpoint(ck), c.buffer(src), cb).wait();
                   },
                   {prev, t});
      pb.nvme_work(prev, sched::Work::kNvmeReadBytes, double(cb));
      plan.acquire(prev, src);
      plan.writes(prev, src);
    }
    const BufferId d = pb.ckb[us];
    pb.ck_up[us] = plan.add(pb.ck_moves[us].name + " up", Lane::kH2D,
                            [rt = rt_.get(), src, d, cb](const TaskContext& c) -> Status {
                              if (c.args<zero::Replay>().flushing) return ok_status();
                              rt->moved(zero::Moved::kH2D, cb);
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
