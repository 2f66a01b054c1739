#include "engine/zero/plan/lower_gathers.h"

#include <algorithm>
#include <string>

namespace strata::engine::zero {

using sched::BufferId;
using sched::Lane;
using sched::TaskContext;
using sched::TaskId;
using sched::Tier;

GatherLowering::GatherLowering(PlanBuilder& pb, const Layout& lay, std::vector<Gather> gathers,
                               size_t depth, const HostBuffers& hb, const OpBuffers& ob,
                               const UpdateTasks& updates, Runtime* rt)
    : pb_(pb),
      lay_(lay),
      gathers_(std::move(gathers)),
      depth_(depth),
      hb_(hb),
      ob_(ob),
      updates_(updates),
      rt_(rt) {
  upload_.assign(gathers_.size(), -1);
}

void GatherLowering::emit_upto(size_t need, const std::vector<TaskId>& op_task) {
  if (need == 0) return;
  const size_t upto = std::min(gathers_.size(), need + depth_);
  while (emitted_ < upto) emit(emitted_++, op_task);
}

void GatherLowering::after_op(size_t i, TaskId t) {
  for (const auto& [after, gather] : deferred_) {
    if (after == i) pb_.plan.depend(gather, t);
  }
}

void GatherLowering::emit(size_t k, const std::vector<TaskId>& op_task) {
  sched::Plan& plan = pb_.plan;
  const DType dt = lay_.dt;
  const Gather& gt = gathers_[k];
  const int64_t b = gt.block;
  const int ph = gt.phase;
  const BufferId gh = ob_.gathered_host[ph][size_t(b)], gd = ob_.gathered_dev[ph][size_t(b)];
  const size_t c16 = static_cast<size_t>(lay_.shard(b));
  const Home home = lay_.home[size_t(b)];
  const std::string what = lay_.name(b) + (ph == 0 ? " (forward)" : " (backward)");
  std::vector<TaskId> deps;
  // Rotated, with the shard on NVMe: the forward gathers the new shard straight from the
  // update's staging (pbuf; its write home then waits for this gather), so the forward's read
  // runs only in a replay without an update (the first). Otherwise the update's new shard must
  // be home first.
  const size_t p = lay_.part_of[size_t(b)];
  const bool from_staging =
      lay_.rotate && home == Home::kNvme && ph == 0 && updates_.shard_acquirer[p] >= 0;
  if (updates_.ready[size_t(b)] >= 0 && !from_staging) deps.push_back(updates_.ready[size_t(b)]);
  // At most `depth` gathers ahead of the one in use: wait for the release of gather k-depth-1.
  // A gather still needed after this one's first use (a checkpointed segment's backward
  // copies stay from its recompute to each layer's backward): wait for its first use instead,
  // so that no gather starts more than `depth` ahead of the compute (without any wait, every
  // backward gather's NVMe read would start with the step and hold its staging throughout).
  if (k > depth_) {
    const Gather& prev = gathers_[k - depth_ - 1];
    const size_t after = prev.last < gt.first ? prev.last : prev.first;
    if (op_task[after] >= 0) {
      deps.push_back(op_task[after]);
    } else {
      deferred_.emplace_back(after, -1);  // that op is added later
    }
  }
  // The rank's shard: in pinned memory (pbuf), read from NVMe into pinned staging, or down
  // from the device into its slot of the gathered copy (gathered in place).
  BufferId sh = hb_.pbuf[size_t(b)];
  size_t send_off = 0;
  TaskId fetch = -1;
  const size_t sbytes = lay_.shard_bytes(b);
  if (home == Home::kNvme) {
    sh = pb_.add_buffer(BufferKind::kNvmeStaging, "param shard " + what, Tier::kPinnedHost, sbytes);
    fetch = plan.add(
        "read param shard " + what, Lane::kNvme,
        [rt = rt_, sh, b, sbytes, from_staging](const TaskContext& c) -> Status {
          if (c.args<Replay>().flushing || (from_staging && c.args<Replay>().update_step != 0))
            return ok_status();
          rt->moved(Moved::kNvmeRead, sbytes);
          return rt->swap.store->read(rt->swap.shard(b), c.buffer(sh), sbytes).wait();
        },
        deps);
    // A gather from staging reads the new shard there, not from NVMe, in a replay that applies
    // the update (predict(): the others read it).
    pb_.nvme_work(fetch, sched::Work::kNvmeReadBytes, double(sbytes));
    if (from_staging) pb_.task_runs_when(fetch, RunsWhen::kNoUpdate);
    plan.acquire(fetch, sh);
    plan.writes(fetch, sh);
  } else if (home == Home::kDevice && !lay_.on_device) {
    sh = gh;
    send_off = static_cast<size_t>(lay_.rank) * sbytes;
    const BufferId d = hb_.dshard[size_t(b)];
    fetch = plan.add(
        "param shard down " + what, Lane::kD2H,
        [rt = rt_, d, gh, send_off, sbytes](const TaskContext& c) -> Status {
          if (c.args<Replay>().flushing) return ok_status();
          rt->moved(Moved::kD2H, sbytes);
          return c.stream->copy(static_cast<std::byte*>(c.buffer(gh)) + send_off, c.buffer(d),
                                sbytes, gpu::CopyKind::kDeviceToHost);
        },
        deps);
    pb_.work(fetch, sched::Work::kD2HBytes, double(sbytes));
    plan.acquire(fetch, gh);
    plan.reads(fetch, d);
    plan.writes(fetch, gh);
  }
  if (fetch >= 0) deps = {fetch};
  const BufferId staged = from_staging ? hb_.pbuf[size_t(b)] : -1;
  if (from_staging) deps.push_back(updates_.shard_acquirer[p]);
  if (lay_.on_device) {
    const TaskId first = on_device(k, sh, staged, fetch, std::move(deps));
    if (!deferred_.empty() && deferred_.back().second == -1) deferred_.back().second = first;
    return;
  }
  const TaskId gather = plan.add(
      "gather " + what, Lane::kComm,
      [rt = rt_, sh, staged, send_off, gh, c16, dt](const TaskContext& c) -> Status {
        if (c.args<Replay>().flushing) return ok_status();
        comm::CollectiveCall call;
        call.kind = comm::CollectiveKind::kAllGather;
        const BufferId src = staged >= 0 && c.args<Replay>().update_step != 0 ? staged : sh;
        call.send = static_cast<const std::byte*>(c.buffer(src)) + send_off;
        call.recv = c.buffer(gh);
        call.count = c16;
        call.dtype = dt;
        rt->count(call, &ZeroTraffic::param_all_gather);
        return rt->comm.start(call).wait();
      },
      deps);
  pb_.collective_work(gather, comm::CollectiveKind::kAllGather, c16, dt, lay_.rank, lay_.ranks);
  const TaskId first = fetch >= 0 ? fetch : gather;
  if (!deferred_.empty() && deferred_.back().second == -1) deferred_.back().second = first;
  if (home != Home::kDevice) plan.acquire(gather, gh);
  plan.reads(gather, sh);
  if (home == Home::kNvme) plan.release(gather, sh);
  if (from_staging) {
    plan.reads(gather, staged);
    plan.depend(updates_.shard_home[p], gather);  // the write home releases pbuf after it
  }
  plan.writes(gather, gh);
  const size_t bytes = lay_.block_bytes(b);
  upload_[k] = plan.add("upload " + what, Lane::kH2D,
                        [rt = rt_, gh, gd, bytes](const TaskContext& c) -> Status {
                          if (c.args<Replay>().flushing) return ok_status();
                          rt->moved(Moved::kH2D, bytes);
                          return c.stream->copy(c.buffer(gd), c.buffer(gh), bytes,
                                                gpu::CopyKind::kHostToDevice);
                        },
                        {gather});
  pb_.work(upload_[k], sched::Work::kH2DBytes, double(bytes));
  pb_.hands_over(upload_[k], gh, gd);
}

// The collectives on the device: the rank's shard up into its slot of the device copy (from
// pinned memory or staging; a device home needs no transfer), then the all-gather there.
// Returns the gather's first task.
TaskId GatherLowering::on_device(size_t k, BufferId sh, BufferId staged, TaskId fetch,
                                 std::vector<TaskId> deps) {
  sched::Plan& plan = pb_.plan;
  const DType dt = lay_.dt;
  const Gather& gt = gathers_[k];
  const int64_t b = gt.block;
  const BufferId gd = ob_.gathered_dev[gt.phase][size_t(b)];
  const size_t c16 = static_cast<size_t>(lay_.shard(b));
  const size_t sbytes = lay_.shard_bytes(b), off = static_cast<size_t>(lay_.rank) * sbytes;
  const Home home = lay_.home[size_t(b)];
  const std::string what = lay_.name(b) + (gt.phase == 0 ? " (forward)" : " (backward)");
  TaskId first = fetch;
  const comm::CollectiveCall call = collective(comm::CollectiveKind::kAllGather, c16, dt);
  const BufferId d = hb_.dshard[size_t(b)];
  BufferId src = d;  // a device home: the all-gather's source
  if (home != Home::kDevice) {
    src = -1;  // in place
    const TaskId up = plan.add(
        "param shard up " + what, Lane::kH2D,
        [rt = rt_, sh, staged, gd, off, sbytes](const TaskContext& c) -> Status {
          if (c.args<Replay>().flushing) return ok_status();
          const BufferId from = staged >= 0 && c.args<Replay>().update_step != 0 ? staged : sh;
          rt->moved(Moved::kH2D, sbytes);
          return c.stream->copy(static_cast<std::byte*>(c.buffer(gd)) + off, c.buffer(from), sbytes,
                                gpu::CopyKind::kHostToDevice);
        },
        std::move(deps));
    pb_.work(up, sched::Work::kH2DBytes, double(sbytes));
    plan.reads(up, sh);
    if (home == Home::kNvme) plan.release(up, sh);
    if (staged >= 0) {
      plan.reads(up, staged);
      plan.depend(updates_.shard_home[lay_.part_of[size_t(b)]], up);
    }
    plan.acquire(up, gd);
    plan.writes(up, gd);
    if (first < 0) first = up;
    deps = {up};
  }
  const TaskId gather = plan.add(
      "gather " + what, rt_->device_lane(),
      [rt = rt_, call, src, gd, off](const TaskContext& c) -> Status {
        if (c.args<Replay>().flushing) return ok_status();
        comm::CollectiveCall all = call;
        all.recv = c.buffer(gd);
        all.send = src >= 0 ? c.buffer(src) : static_cast<std::byte*>(c.buffer(gd)) + off;
        return rt->on_device(all, &ZeroTraffic::param_all_gather, c.stream);
      },
      std::move(deps));
  pb_.collective_work(gather, comm::CollectiveKind::kAllGather, c16, dt, lay_.rank, lay_.ranks,
                      true);
  if (src >= 0) {
    plan.reads(gather, src);
    plan.acquire(gather, gd);
  } else {
    plan.reads(gather, gd);  // in place: the rank's shard
  }
  plan.writes(gather, gd);
  upload_[k] = gather;
  return first >= 0 ? first : gather;
}

}  // namespace strata::engine::zero
