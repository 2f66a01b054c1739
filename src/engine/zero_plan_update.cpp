// ZeroStep::build_plan, the optimizer side: the NVMe reads of the optimizer state, the update of
// a partition (CPU Adam, or the device optimizer with its gradient up and new values down), and
// the way of its new parameters to their next use (all-gathered and uploaded, or the new shard
// to its home).
#include <algorithm>
#include <cstring>
#include <string>

#include "engine/zero_plan_build.h"

namespace strata::engine {

using sched::BufferId;
using sched::Lane;
using sched::TaskContext;
using sched::TaskId;
using sched::Tier;

void ZeroStep::plan_state_reads(PlanBuild& pb) {
  const sched::TaskId first = pb.next_task();
  const size_t nb = pb.nb;
  pb.ready.assign(nb, -1);
  pb.grad_reader.assign(nb, -1);
  pb.part_of.assign(nb, 0);
  for (size_t p = 0; p < nb; ++p) pb.part_of[size_t(blocks_[p])] = p;
  // Delayed, the new parameters go up after the backward's last use of each block: backward
  // order too.
  for (size_t k = 0; k < nb; ++k) pb.visit.push_back(rotate_ && !pb.delayed ? nb - 1 - k : k);
  pb.staging.assign(nb, -1);
  pb.read.assign(nb, -1);
  pb.state_written.assign(nb, -1);
  pb.shard_acquirer.assign(nb, -1);
  pb.shard_home.assign(nb, -1);
  pb.grad_up.assign(nb, -1);
  pb.grad_up_buf.assign(nb, -1);
  for (size_t p : pb.visit) {
    if (!rt_->opt.on_nvme(p)) continue;
    const std::string n = pb.name(blocks_[p]);
    pb.staging[p] =
        pb.add_buffer(Kind::kNvmeStaging, "state " + n, Tier::kPinnedHost, rt_->opt.state_bytes(p));
    const BufferId buf = pb.staging[p];
    pb.read[p] =
        pb.plan.add("read state " + n, Lane::kNvme, [rt = rt_.get(), p, buf](const TaskContext& c) {
          if (c.args<zero::Replay>().update_step == 0) return ok_status();
          rt->moved(zero::Moved::kNvmeRead, rt->opt.state_bytes(p));
          return rt->opt.read_partition(p, c.buffer(buf)).wait();
        });
    pb.nvme_work(pb.read[p], sched::Work::kNvmeReadBytes, double(rt_->opt.state_bytes(p)));
    pb.plan.acquire(pb.read[p], buf);
    pb.plan.writes(pb.read[p], buf);
    pb.slot_bytes = std::max(pb.slot_bytes, round_page(rt_->opt.state_bytes(p)));
  }
  pb.runs_when(first, RunsWhen::kUpdate);
}

// The new parameters of a block kept whole on the device: after `after` wrote the rank's part
// into pbuf, all-gathered (stages 1-3) and uploaded into the model's block.
TaskId ZeroStep::add_params_up(PlanBuild& pb, int64_t b, TaskId after) {
  model::Model& m = rt_->model;
  sched::Plan& plan = pb.plan;
  const DType dt = pb.dt;
  const size_t es = pb.es;
  const int rank = pb.rank;
  const BufferId u = pbuf_[size_t(b)];
  TaskId before_up = after;
  if (pb.stage >= 1) {
    const size_t c16 = static_cast<size_t>(pb.shard(b));
    before_up = plan.add("gather params " + pb.name(b), Lane::kComm,
                         [rt = rt_.get(), u, c16, dt, rank, es](const TaskContext& c) -> Status {
                           if (c.args<zero::Replay>().update_step == 0) return ok_status();
                           auto* base = static_cast<std::byte*>(c.buffer(u));
                           comm::CollectiveCall call;
                           call.kind = comm::CollectiveKind::kAllGather;
                           call.send = base + static_cast<size_t>(rank) * c16 * es;
                           call.recv = base;
                           call.count = c16;
                           call.dtype = dt;
                           rt->count(call, &ZeroTraffic::param_all_gather);
                           return rt->comm.start(call).wait();
                         },
                         {after});
    pb.collective_work(before_up, comm::CollectiveKind::kAllGather, c16);
    plan.reads(before_up, u);
    plan.writes(before_up, u);
  }
  const size_t bytes = static_cast<size_t>(pb.numel(b)) * es;
  const TaskId up = plan.add("params up " + pb.name(b), Lane::kH2D,
                             [rt = rt_.get(), &m, b, u, bytes](const TaskContext& c) {
                               if (c.args<zero::Replay>().update_step == 0) return ok_status();
                               rt->moved(zero::Moved::kH2D, bytes);
                               return c.stream->copy(m.param_block(b), c.buffer(u), bytes,
                                                     gpu::CopyKind::kHostToDevice);
                             },
                             {before_up});
  pb.work(up, sched::Work::kH2DBytes, double(bytes));
  plan.reads(up, u);
  return up;
}

// Device optimizer: partition p's reduced gradient up (h2d) into a device buffer. Added for
// every partition before any new parameters go up, so that the in-order h2d lane does not
// hold a gradient behind the previous block's whole update.
void ZeroStep::add_grad_up(PlanBuild& pb, size_t p, std::vector<TaskId> deps) {
  const int64_t b = blocks_[p];
  const BufferId g = pb.stage >= 2 ? pb.gshard[size_t(b)] : pb.gfull[size_t(b)];
  const size_t grad_off = pb.stage == 1 ? static_cast<size_t>(pb.rank) * pb.shard_bytes(b) : 0;
  const size_t bytes = static_cast<size_t>(rt_->opt.numel(p)) * (pb.stage >= 2 ? pb.acc_es : pb.es);
  pb.largest_opt = std::max<uint64_t>(pb.largest_opt, (bytes + 255) / 256 * 256);
  const BufferId gdev =
      pb.add_buffer(Kind::kOptimizerIo, "grad up " + pb.name(b), Tier::kDevice, bytes);
  const TaskId gup = pb.plan.add(
      "grad up " + pb.name(b), Lane::kH2D,
      [rt = rt_.get(), g, gdev, grad_off, bytes](const TaskContext& c) {
        if (c.args<zero::Replay>().update_step == 0) return ok_status();
        rt->moved(zero::Moved::kH2D, bytes);
        return c.stream->copy(c.buffer(gdev), static_cast<const std::byte*>(c.buffer(g)) + grad_off,
                              bytes, gpu::CopyKind::kHostToDevice);
      },
      std::move(deps));
  pb.work(gup, sched::Work::kH2DBytes, double(bytes));
  pb.plan.acquire(gup, gdev);
  pb.plan.reads(gup, g);
  pb.plan.writes(gup, gdev);
  pb.grad_up[p] = gup;
  pb.grad_up_buf[p] = gdev;
}

// Stage 3: the new shard of block b, written into pbuf by `after`, to its home (pinned: it is
// there already); returns the task after which it is there.
TaskId ZeroStep::finish_shard(PlanBuild& pb, int64_t b, TaskId after) {
  const Home home = home_[size_t(b)];
  if (home == Home::kPinned) return after;
  const BufferId u = pbuf_[size_t(b)], d = dshard_[size_t(b)];
  const size_t bytes = pb.shard_bytes(b);
  const TaskId t =
      home == Home::kDevice
          ? pb.plan.add("param shard up " + pb.name(b), Lane::kH2D,
                        [rt = rt_.get(), u, d, bytes](const TaskContext& c) -> Status {
                          if (c.args<zero::Replay>().update_step == 0) return ok_status();
                          rt->moved(zero::Moved::kH2D, bytes);
                          return c.stream->copy(c.buffer(d), c.buffer(u), bytes,
                                                gpu::CopyKind::kHostToDevice);
                        },
                        {after})
          : pb.plan.add(
                "write param shard " + pb.name(b), Lane::kNvme,
                [rt = rt_.get(), u, b, bytes](const TaskContext& c) -> Status {
                  if (c.args<zero::Replay>().update_step == 0) return ok_status();
                  rt->moved(zero::Moved::kNvmeWrite, bytes);
                  return rt->swap.store->write(rt->swap.shard(b), c.buffer(u), bytes).wait();
                },
                {after});
  if (home == Home::kDevice) {
    pb.work(t, sched::Work::kH2DBytes, double(bytes));
  } else {
    pb.nvme_work(t, sched::Work::kNvmeWriteBytes, double(bytes));
  }
  pb.plan.reads(t, u);
  pb.plan.release(t, u);
  if (d >= 0) pb.plan.writes(t, d);
  return t;
}

// The update of partition p after `deps`; returns the task after which block b's new
// parameters are where its next use reads them. Its tasks run only in a replay with an update.
TaskId ZeroStep::add_update(PlanBuild& pb, size_t p, std::vector<TaskId> deps) {
  const TaskId first = pb.next_task();
  const TaskId t = add_update_tasks(pb, p, std::move(deps));
  pb.runs_when(first, RunsWhen::kUpdate);
  return t;
}

TaskId ZeroStep::add_update_tasks(PlanBuild& pb, size_t p, std::vector<TaskId> deps) {
  sched::Plan& plan = pb.plan;
  const DType dt = pb.dt;
  const int64_t b = blocks_[p];
  const bool sharded = sharded_params(b);
  const BufferId g = pb.stage >= 2 ? pb.gshard[size_t(b)] : pb.gfull[size_t(b)];
  const BufferId u = pbuf_[size_t(b)];
  const BufferId st = pb.staging[p];
  // Where this rank's gradient and new parameters sit in those buffers.
  const size_t grad_off = pb.stage == 1 ? static_cast<size_t>(pb.rank) * pb.shard_bytes(b) : 0;
  const size_t out_off =
      pb.stage >= 1 && !sharded ? static_cast<size_t>(pb.rank) * pb.shard_bytes(b) : 0;
  const int64_t opt_numel = rt_->opt.numel(p);
  if (pb.read[p] >= 0) deps.push_back(pb.read[p]);
  if (rt_->device_opt && rt_->device_opt->on_device(p))
    return add_device_update(pb, p, std::move(deps));
  const TaskId adam = plan.add(
      "adam " + pb.name(b), Lane::kCpu,
      [rt = rt_.get(), p, g, u, st, grad_off, out_off, opt_numel, dt,
       gdt = pb.stage >= 2 ? pb.acc : dt](const TaskContext& c) -> Status {
        if (c.args<zero::Replay>().update_step == 0) return ok_status();
        void* state = st >= 0 ? c.buffer(st) : nullptr;
        auto* out = static_cast<std::byte*>(c.buffer(u)) + out_off;
        PartitionGrad pg;
        pg.grads = static_cast<const std::byte*>(c.buffer(g)) + grad_off;
        pg.grad_dtype = gdt;
        pg.out16 = dt == DType::kF32 ? nullptr : out;
        pg.out_dtype = dt;
        STRATA_RETURN_IF_ERROR(
            rt->opt.step_partition(p, state, pg,
                                   cpu::AdamStep{c.args<zero::Replay>().update_step,
                                                 c.args<zero::Replay>().update_grad_scale}));
        if (dt == DType::kF32) {
          std::memcpy(out, rt->opt.master_params(p, state), static_cast<size_t>(opt_numel) * 4);
        }
        return ok_status();
      },
      deps);
  pb.work(adam, sched::Work::kAdamElements, double(opt_numel));
  plan.reads(adam, g);
  if (transient(b)) plan.acquire(adam, u);
  plan.writes(adam, u);
  pb.grad_reader[size_t(b)] = adam;
  if (st >= 0) {
    plan.reads(adam, st);
    plan.writes(adam, st);
    const TaskId write = plan.add("write state " + pb.name(b), Lane::kNvme,
                                  [rt = rt_.get(), p, st](const TaskContext& c) {
                                    if (c.args<zero::Replay>().update_step == 0) return ok_status();
                                    rt->moved(zero::Moved::kNvmeWrite, rt->opt.state_bytes(p));
                                    return rt->opt.write_partition(p, c.buffer(st)).wait();
                                  },
                                  {adam});
    pb.nvme_work(write, sched::Work::kNvmeWriteBytes, double(rt_->opt.state_bytes(p)));
    plan.reads(write, st);
    plan.release(write, st);
    pb.state_written[p] = write;
  }
  // Stage 3: the new shard goes home; it is gathered with the block's next forward.
  if (transient(b)) {
    pb.shard_acquirer[p] = adam;
    pb.shard_home[p] = finish_shard(pb, b, adam);
    return pb.shard_home[p];
  }
  return sharded ? finish_shard(pb, b, adam) : add_params_up(pb, b, adam);
}

// add_update() of a partition the device optimizer updates (deps include its state read).
TaskId ZeroStep::add_device_update(PlanBuild& pb, size_t p, std::vector<TaskId> deps) {
  model::Model& m = rt_->model;
  sched::Plan& plan = pb.plan;
  const DType dt = pb.dt;
  const int64_t b = blocks_[p];
  const bool sharded = sharded_params(b);
  const BufferId u = pbuf_[size_t(b)];
  const size_t out_off =
      pb.stage >= 1 && !sharded ? static_cast<size_t>(pb.rank) * pb.shard_bytes(b) : 0;
  if (pb.ranks == 1 && pb.stage == 0) {
    // One rank at stage 0: the gradient is the model's own (a one-rank reduction is the
    // identity), still in its block when the rotated update runs before "zero grads".
    const TaskId t = plan.add(
        "adam " + pb.name(b) + " (device)", Lane::kCompute,
        [rt = rt_.get(), &m, p, b, dt](const TaskContext& c) -> Status {
          if (c.args<zero::Replay>().update_step == 0) return ok_status();
          return rt->device_opt->update(*c.stream, rt->opt, p, m.grad_block(b), dt,
                                        m.param_block(b), dt,
                                        cpu::AdamStep{c.args<zero::Replay>().update_step,
                                                      c.args<zero::Replay>().update_grad_scale});
        },
        deps);
    pb.work(t, sched::Work::kDeviceAdamElements, double(rt_->opt.numel(p)));
    return t;
  }
  // The rank's reduced gradient up; Adam on the compute lane (before any forward: the lane
  // runs in order); the new values into the model's block (stage 0) or down into pbuf.
  const size_t bytes = static_cast<size_t>(rt_->opt.numel(p)) * pb.es;
  if (pb.grad_up[p] < 0) add_grad_up(pb, p, deps);
  const TaskId gup = pb.grad_up[p];
  const BufferId gdev = pb.grad_up_buf[p];
  const BufferId odev =
      pb.stage >= 1
          ? pb.add_buffer(Kind::kOptimizerIo, "new params " + pb.name(b), Tier::kDevice, bytes)
          : -1;
  const TaskId dadam = plan.add(
      "adam " + pb.name(b) + " (device)", Lane::kCompute,
      [rt = rt_.get(), &m, p, b, gdev, odev, dt,
       gdt = pb.stage >= 2 ? pb.acc : dt](const TaskContext& c) -> Status {
        if (c.args<zero::Replay>().update_step == 0) return ok_status();
        return rt->device_opt->update(*c.stream, rt->opt, p, c.buffer(gdev), gdt,
                                      odev >= 0 ? c.buffer(odev) : m.param_block(b), dt,
                                      cpu::AdamStep{c.args<zero::Replay>().update_step,
                                                    c.args<zero::Replay>().update_grad_scale});
      },
      {gup});
  pb.work(dadam, sched::Work::kDeviceAdamElements, double(rt_->opt.numel(p)));
  plan.reads(dadam, gdev);
  plan.release(dadam, gdev);
  if (odev < 0) return dadam;  // stage 0: the model's block is updated in place
  plan.acquire(dadam, odev);
  plan.writes(dadam, odev);
  const TaskId down =
      plan.add("new params down " + pb.name(b), Lane::kD2H,
               [rt = rt_.get(), u, odev, out_off, bytes](const TaskContext& c) {
                 if (c.args<zero::Replay>().update_step == 0) return ok_status();
                 rt->moved(zero::Moved::kD2H, bytes);
                 return c.stream->copy(static_cast<std::byte*>(c.buffer(u)) + out_off,
                                       c.buffer(odev), bytes, gpu::CopyKind::kDeviceToHost);
               },
               {dadam});
  pb.work(down, sched::Work::kD2HBytes, double(bytes));
  plan.reads(down, odev);
  plan.release(down, odev);
  if (transient(b)) plan.acquire(down, u);
  plan.writes(down, u);
  if (transient(b)) {
    pb.shard_acquirer[p] = down;
    pb.shard_home[p] = finish_shard(pb, b, down);
    return pb.shard_home[p];
  }
  return sharded ? finish_shard(pb, b, down) : add_params_up(pb, b, down);
}

}  // namespace strata::engine
