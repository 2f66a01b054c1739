#include "engine/zero/plan/lower_checkpoints.h"

#include <string>
#include <utility>

namespace strata::engine::zero {

using sched::BufferId;
using sched::Lane;
using sched::TaskContext;
using sched::TaskId;
using sched::Tier;

CheckpointLowering::CheckpointLowering(PlanBuilder& pb, std::vector<CheckpointMove> moves,
                                       size_t num_ops, Home home, size_t bytes, Runtime* rt)
    : pb_(pb), moves_(std::move(moves)), home_(home), bytes_(bytes), rt_(rt) {
  uses_.assign(num_ops, {});
  down_after_.assign(num_ops, {});
  up_after_.assign(num_ops, {});
  up_.assign(moves_.size(), -1);
  stored_.assign(moves_.size(), -1);
  for (size_t c = 0; c < moves_.size(); ++c) {
    const CheckpointMove& mv = moves_[c];
    const std::string& n = mv.name;
    fwd_.push_back(pb.add_buffer(BufferKind::kCheckpoint, n + " (forward)", Tier::kDevice, bytes));
    bwd_.push_back(pb.add_buffer(BufferKind::kCheckpoint, n + " (backward)", Tier::kDevice, bytes));
    host_.push_back(pb.add_buffer(BufferKind::kCheckpoint,
                                  n + (home == Home::kNvme ? " (to NVMe)" : ""), Tier::kPinnedHost,
                                  bytes));
    from_nvme_.push_back(
        home == Home::kNvme
            ? pb.add_buffer(BufferKind::kCheckpoint, n + " (from NVMe)", Tier::kPinnedHost, bytes)
            : -1);
    const int64_t s = mv.seg, ck = int64_t(c);
    uses_[mv.writer].push_back({s, ck, fwd_[c], true, false});
    uses_[mv.reader].push_back({s, ck, fwd_[c], false, false});
    uses_[mv.recompute].push_back({s, ck, bwd_[c], false, false});
    uses_[mv.backward].push_back({s, ck, bwd_[c], false, true});
    down_after_[mv.reader].push_back(ck);
    up_after_[mv.trigger].push_back(ck);
  }
}

void CheckpointLowering::declare(size_t op, TaskId t) {
  sched::Plan& plan = pb_.plan;
  for (const Use& u : uses_[op]) {
    if (u.write) {
      plan.acquire(t, u.buf);
      plan.writes(t, u.buf);
    } else {
      plan.reads(t, u.buf);
      if (up_[size_t(u.ck)] >= 0 && u.buf == bwd_[size_t(u.ck)]) plan.depend(t, up_[size_t(u.ck)]);
    }
    if (u.release) plan.release(t, u.buf);
  }
}

void CheckpointLowering::after(size_t op, TaskId t, const std::vector<TaskId>& op_task) {
  sched::Plan& plan = pb_.plan;
  const size_t cb = bytes_;
  for (int64_t ck : down_after_[op]) {
    const auto us = size_t(ck);
    const BufferId f = fwd_[us], h = host_[us];
    const std::string& name = moves_[us].name;
    const TaskId down = plan.add(name + " down", Lane::kD2H,
                                 [rt = rt_, f, h, cb](const TaskContext& c) -> Status {
                                   if (c.args<Replay>().flushing) return ok_status();
                                   rt->moved(Moved::kD2H, cb);
                                   return c.stream->copy(c.buffer(h), c.buffer(f), cb,
                                                         gpu::CopyKind::kDeviceToHost);
                                 },
                                 {op_task[moves_[us].writer], t});
    pb_.work(down, sched::Work::kD2HBytes, double(cb));
    plan.acquire(down, h);
    plan.reads(down, f);
    plan.release(down, f);
    plan.writes(down, h);
    stored_[us] = down;
    if (home_ != Home::kNvme) continue;
    stored_[us] =
        plan.add("write " + name, Lane::kNvme,
                 [rt = rt_, h, ck, cb](const TaskContext& c) -> Status {
                   if (c.args<Replay>().flushing) return ok_status();
                   rt->moved(Moved::kNvmeWrite, cb);
                   return rt->swap.store->write(rt->swap.checkpoint(ck), c.buffer(h), cb).wait();
                 },
                 {down});
    pb_.nvme_work(stored_[us], sched::Work::kNvmeWriteBytes, double(cb));
    plan.reads(stored_[us], h);
    plan.release(stored_[us], h);
  }
  for (int64_t ck : up_after_[op]) {
    const auto us = size_t(ck);
    const std::string& name = moves_[us].name;
    BufferId src = host_[us];
    TaskId prev = stored_[us];
    if (home_ == Home::kNvme) {
      src = from_nvme_[us];
      prev =
          plan.add("read " + name, Lane::kNvme,
                   [rt = rt_, src, ck, cb](const TaskContext& c) -> Status {
                     if (c.args<Replay>().flushing) return ok_status();
                     rt->moved(Moved::kNvmeRead, cb);
                     return rt->swap.store->read(rt->swap.checkpoint(ck), c.buffer(src), cb).wait();
                   },
                   {prev, t});
      pb_.nvme_work(prev, sched::Work::kNvmeReadBytes, double(cb));
      plan.acquire(prev, src);
      plan.writes(prev, src);
    }
    const BufferId d = bwd_[us];
    up_[us] = plan.add(name + " up", Lane::kH2D,
                       [rt = rt_, src, d, cb](const TaskContext& c) -> Status {
                         if (c.args<Replay>().flushing) return ok_status();
                         rt->moved(Moved::kH2D, cb);
                         return c.stream->copy(c.buffer(d), c.buffer(src), cb,
                                               gpu::CopyKind::kHostToDevice);
                       },
                       {prev, t});
    pb_.work(up_[us], sched::Work::kH2DBytes, double(cb));
    pb_.hands_over(up_[us], src, d);
  }
}

}  // namespace strata::engine::zero
