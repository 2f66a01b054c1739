// ZeroStep::build_plan, the stage-3 gathers: the schedule's (zero/plan/gathers.h) tasks, per
// gather the shard fetched from its home, the all-gather and the upload.
#include <string>

#include "engine/zero_plan_build.h"

namespace strata::engine {

using sched::BufferId;
using sched::Lane;
using sched::TaskContext;
using sched::TaskId;
using sched::Tier;

// The gather schedule (stage 2, zero/plan/gathers.h) and the lowering's slots for it.
void ZeroStep::plan_gathers(PlanBuild& pb) {
  std::vector<bool> need(pb.nb);
  for (size_t b = 0; b < pb.nb; ++b) need[b] = gathered(int64_t(b));
  pb.gathers = zero::schedule_gathers(pb.ops.ops, need);
  pb.upload.assign(pb.gathers.size(), -1);
  pb.op_task.assign(pb.ops.ops.size(), -1);
}

void ZeroStep::emit_gather(PlanBuild& pb, size_t k) {
  sched::Plan& plan = pb.plan;
  const DType dt = pb.dt;
  const zero::Gather& gt = pb.gathers[k];
  const int64_t b = gt.block;
  const int ph = gt.phase;
  const BufferId gh = pb.gathered_host[ph][size_t(b)], gd = pb.gathered_dev[ph][size_t(b)];
  const size_t c16 = static_cast<size_t>(pb.shard(b));
  const Home home = home_[size_t(b)];
  const std::string what = pb.name(b) + (ph == 0 ? " (forward)" : " (backward)");
  std::vector<TaskId> deps;
  // Rotated, with the shard on NVMe: the forward gathers the new shard straight from the
  // update's staging (pbuf; its write home then waits for this gather), so the forward's read
  // runs only in a replay without an update (the first). Otherwise the update's new shard must
  // be home first.
  const size_t p = pb.part_of[size_t(b)];
  const bool from_staging = rotate_ && home == Home::kNvme && ph == 0 && pb.shard_acquirer[p] >= 0;
  if (pb.ready[size_t(b)] >= 0 && !from_staging) deps.push_back(pb.ready[size_t(b)]);
  // At most `depth` gathers ahead of the one in use: wait for the release of gather k-depth-1.
  // A gather still needed after this one's first use (a checkpointed segment's backward
  // copies stay from its recompute to each layer's backward): wait for its first use instead,
  // so that no gather starts more than `depth` ahead of the compute (without any wait, every
  // backward gather's NVMe read would start with the step and hold its staging throughout).
  if (k > pb.depth) {
    const zero::Gather& prev = pb.gathers[k - pb.depth - 1];
    const size_t after = prev.last < gt.first ? prev.last : prev.first;
    if (pb.op_task[after] >= 0) {
      deps.push_back(pb.op_task[after]);
    } else {
      pb.deferred.emplace_back(after, -1);  // that op is added later
    }
  }
  // The rank's shard: in pinned memory (pbuf), read from NVMe into pinned staging, or down
  // from the device into its slot of the gathered copy (gathered in place).
  BufferId sh = pbuf_[size_t(b)];
  size_t send_off = 0;
  TaskId fetch = -1;
  const size_t sbytes = pb.shard_bytes(b);
  if (home == Home::kNvme) {
    sh = pb.add_buffer(Kind::kNvmeStaging, "param shard " + what, Tier::kPinnedHost, sbytes);
    fetch = plan.add(
        "read param shard " + what, Lane::kNvme,
        [rt = rt_.get(), sh, b, sbytes, from_staging](const TaskContext& c) -> Status {
          if (c.args<zero::Replay>().flushing ||
              (from_staging && c.args<zero::Replay>().update_step != 0))
            return ok_status();
          rt->moved(zero::Moved::kNvmeRead, sbytes);
          return rt->swap.store->read(rt->swap.shard(b), c.buffer(sh), sbytes).wait();
        },
        deps);
    // A gather from staging reads the new shard there, not from NVMe, in a replay that applies
    // the update (predict(): the others read it).
    pb.nvme_work(fetch, sched::Work::kNvmeReadBytes, double(sbytes));
    if (from_staging) pb.task_runs_when(fetch, RunsWhen::kNoUpdate);
    plan.acquire(fetch, sh);
    plan.writes(fetch, sh);
  } else if (home == Home::kDevice) {
    sh = gh;
    send_off = static_cast<size_t>(pb.rank) * sbytes;
    const BufferId d = dshard_[size_t(b)];
    fetch = plan.add(
        "param shard down " + what, Lane::kD2H,
        [rt = rt_.get(), d, gh, send_off, sbytes](const TaskContext& c) -> Status {
          if (c.args<zero::Replay>().flushing) return ok_status();
          rt->moved(zero::Moved::kD2H, sbytes);
          return c.stream->copy(static_cast<std::byte*>(c.buffer(gh)) + send_off, c.buffer(d),
                                sbytes, gpu::CopyKind::kDeviceToHost);
        },
        deps);
    pb.work(fetch, sched::Work::kD2HBytes, double(sbytes));
    plan.acquire(fetch, gh);
    plan.reads(fetch, d);
    plan.writes(fetch, gh);
  }
  if (fetch >= 0) deps = {fetch};
  const BufferId staged = from_staging ? pbuf_[size_t(b)] : -1;
  if (from_staging) deps.push_back(pb.shard_acquirer[p]);
  const TaskId gather = plan.add(
      "gather " + what, Lane::kComm,
      [rt = rt_.get(), sh, staged, send_off, gh, c16, dt](const TaskContext& c) -> Status {
        if (c.args<zero::Replay>().flushing) return ok_status();
        comm::CollectiveCall call;
        call.kind = comm::CollectiveKind::kAllGather;
        const BufferId src = staged >= 0 && c.args<zero::Replay>().update_step != 0 ? staged : sh;
        call.send = static_cast<const std::byte*>(c.buffer(src)) + send_off;
        call.recv = c.buffer(gh);
        call.count = c16;
        call.dtype = dt;
        rt->count(call, &ZeroTraffic::param_all_gather);
        return rt->comm.start(call).wait();
      },
      deps);
  pb.collective_work(gather, comm::CollectiveKind::kAllGather, c16);
  const TaskId first = fetch >= 0 ? fetch : gather;
  if (!pb.deferred.empty() && pb.deferred.back().second == -1) pb.deferred.back().second = first;
  if (home != Home::kDevice) plan.acquire(gather, gh);
  plan.reads(gather, sh);
  if (home == Home::kNvme) plan.release(gather, sh);
  if (from_staging) {
    plan.reads(gather, staged);
    plan.depend(pb.shard_home[p], gather);  // the write home releases pbuf after this gather
  }
  plan.writes(gather, gh);
  const size_t bytes = static_cast<size_t>(pb.numel(b)) * pb.es;
  pb.upload[k] = plan.add("upload " + what, Lane::kH2D,
                          [rt = rt_.get(), gh, gd, bytes](const TaskContext& c) -> Status {
                            if (c.args<zero::Replay>().flushing) return ok_status();
                            rt->moved(zero::Moved::kH2D, bytes);
                            return c.stream->copy(c.buffer(gd), c.buffer(gh), bytes,
                                                  gpu::CopyKind::kHostToDevice);
                          },
                          {gather});
  pb.work(pb.upload[k], sched::Work::kH2DBytes, double(bytes));
  plan.reads(pb.upload[k], gh);
  plan.release(pb.upload[k], gh);
  plan.acquire(pb.upload[k], gd);
  plan.writes(pb.upload[k], gd);
}

}  // namespace strata::engine
