// Stage 5 of the ZeRO plan compiler, the update tasks (updates.h).
#include "engine/zero/plan/updates.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace strata::engine::zero {

using sched::BufferId;
using sched::Lane;
using sched::TaskContext;
using sched::TaskId;
using sched::Tier;

UpdateLowering::UpdateLowering(PlanBuilder& pb, const Layout& lay, const HostBuffers& hb,
                               Runtime* rt)
    : pb_(pb), lay_(lay), hb_(hb), rt_(rt) {
  const size_t nb = lay.nb();
  for (size_t k = 0; k < nb; ++k) visit_.push_back(lay.rotate && !lay.delayed ? nb - 1 - k : k);
  staging_.assign(nb, -1);
  grad_up_.assign(nb, -1);
  grad_up_buf_.assign(nb, -1);
  t_.ready.assign(nb, -1);
  t_.grad_reader.assign(nb, -1);
  t_.shard_acquirer.assign(nb, -1);
  t_.shard_home.assign(nb, -1);
  t_.read.assign(nb, -1);
  t_.state_written.assign(nb, -1);
}

void UpdateLowering::lower_state_reads() {
  const TaskId first = pb_.next_task();
  OffloadedOptimizer& opt = rt_->opt;
  for (size_t p : visit_) {
    if (!opt.on_nvme(p)) continue;
    const std::string n = lay_.name(lay_.blocks[p]);
    staging_[p] = pb_.add_buffer(BufferKind::kNvmeStaging, "state " + n, Tier::kPinnedHost,
                                 opt.state_bytes(p));
    const BufferId buf = staging_[p];
    t_.read[p] =
        pb_.plan.add("read state " + n, Lane::kNvme, [rt = rt_, p, buf](const TaskContext& c) {
          if (c.args<Replay>().update_step == 0) return ok_status();
          rt->moved(Moved::kNvmeRead, rt->opt.state_bytes(p));
          return rt->opt.read_partition(p, c.buffer(buf)).wait();
        });
    pb_.nvme_work(t_.read[p], sched::Work::kNvmeReadBytes, double(opt.state_bytes(p)));
    pb_.plan.acquire(t_.read[p], buf);
    pb_.plan.writes(t_.read[p], buf);
    slot_bytes_ = std::max(slot_bytes_, round_page(opt.state_bytes(p)));
  }
  pb_.runs_when(first, RunsWhen::kUpdate);
}

void UpdateLowering::lower_grad_ups() {
  if (!rt_->device_opt || (lay_.ranks == 1 && lay_.stage == 0)) return;
  const TaskId first = pb_.next_task();
  for (size_t p : visit_) {
    if (rt_->device_opt->on_device(p) && !lay_.grads_on_device(lay_.blocks[p])) add_grad_up(p, {});
  }
  pb_.runs_when(first, RunsWhen::kUpdate);
}

void UpdateLowering::lower_rotated() {
  for (size_t p : visit_) t_.ready[size_t(lay_.blocks[p])] = add(p, {});
}

TaskId UpdateLowering::add(size_t p, std::vector<TaskId> deps) {
  const TaskId first = pb_.next_task();
  const TaskId t = add_tasks(p, std::move(deps));
  pb_.runs_when(first, RunsWhen::kUpdate);
  return t;
}

// The new parameters of a block kept whole on the device: after `after` wrote the rank's part
// into pbuf, all-gathered (stages 1-3) and uploaded into the model's block; with the collectives
// on the device (stages 1-3), the rank's part up into its slot of a padded device copy,
// all-gathered there and copied into the model's block.
TaskId UpdateLowering::params_up(int64_t b, TaskId after) {
  if (lay_.on_device && lay_.stage >= 1) return params_up_on_device(b, after);
  sched::Plan& plan = pb_.plan;
  const DType dt = lay_.dt;
  const size_t es = lay_.es();
  const int rank = lay_.rank;
  const BufferId u = hb_.pbuf[size_t(b)];
  TaskId before_up = after;
  if (lay_.stage >= 1) {
    const size_t c16 = static_cast<size_t>(lay_.shard(b));
    before_up = plan.add("gather params " + lay_.name(b), Lane::kComm,
                         [rt = rt_, u, c16, dt, rank, es](const TaskContext& c) -> Status {
                           if (c.args<Replay>().update_step == 0) return ok_status();
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
    pb_.collective_work(before_up, comm::CollectiveKind::kAllGather, c16, dt, rank, lay_.ranks);
    plan.reads(before_up, u);
    plan.writes(before_up, u);
  }
  const size_t bytes = lay_.block_bytes(b);
  const TaskId up = plan.add("params up " + lay_.name(b), Lane::kH2D,
                             [rt = rt_, b, u, bytes](const TaskContext& c) {
                               if (c.args<Replay>().update_step == 0) return ok_status();
                               rt->moved(Moved::kH2D, bytes);
                               return c.stream->copy(rt->model.param_block(b), c.buffer(u), bytes,
                                                     gpu::CopyKind::kHostToDevice);
                             },
                             {before_up});
  pb_.work(up, sched::Work::kH2DBytes, double(bytes));
  plan.reads(up, u);
  return up;
}

BufferId UpdateLowering::device_copy(int64_t b) {
  return pb_.add_buffer(BufferKind::kOptimizerIo, "new params " + lay_.name(b) + " (device)",
                        Tier::kDevice, lay_.padded_bytes(b));
}

TaskId UpdateLowering::params_up_on_device(int64_t b, TaskId after) {
  sched::Plan& plan = pb_.plan;
  const size_t sbytes = lay_.shard_bytes(b), off = static_cast<size_t>(lay_.rank) * sbytes;
  const BufferId u = hb_.pbuf[size_t(b)];
  const BufferId d = device_copy(b);
  const TaskId up =
      plan.add("params up " + lay_.name(b), Lane::kH2D,
               [rt = rt_, u, d, off, sbytes](const TaskContext& c) {
                 if (c.args<Replay>().update_step == 0) return ok_status();
                 rt->moved(Moved::kH2D, sbytes);
                 return c.stream->copy(static_cast<std::byte*>(c.buffer(d)) + off,
                                       static_cast<const std::byte*>(c.buffer(u)) + off, sbytes,
                                       gpu::CopyKind::kHostToDevice);
               },
               {after});
  pb_.work(up, sched::Work::kH2DBytes, double(sbytes));
  plan.reads(up, u);
  plan.acquire(up, d);
  plan.writes(up, d);
  return gather_on_device(b, d, up);
}

TaskId UpdateLowering::gather_on_device(int64_t b, BufferId d, TaskId after) {
  sched::Plan& plan = pb_.plan;
  const DType dt = lay_.dt;
  const size_t c16 = static_cast<size_t>(lay_.shard(b));
  const size_t off = static_cast<size_t>(lay_.rank) * lay_.shard_bytes(b);
  const size_t bytes = lay_.block_bytes(b);
  const comm::CollectiveCall call = collective(comm::CollectiveKind::kAllGather, c16, dt);
  const TaskId gather =
      plan.add("gather params " + lay_.name(b), rt_->device_lane(),
               [rt = rt_, d, off, call](const TaskContext& c) -> Status {
                 if (c.args<Replay>().update_step == 0) return ok_status();
                 comm::CollectiveCall all = call;
                 auto* base = static_cast<std::byte*>(c.buffer(d));
                 all.send = base + off;
                 all.recv = base;
                 return rt->on_device(all, &ZeroTraffic::param_all_gather, c.stream);
               },
               {after});
  pb_.collective_work(gather, comm::CollectiveKind::kAllGather, c16, dt, lay_.rank, lay_.ranks,
                      true);
  plan.reads(gather, d);
  plan.writes(gather, d);
  // Into the model's block on the device (no host link crossed).
  const TaskId copy = plan.add("new params into " + lay_.name(b), Lane::kH2D,
                               [rt = rt_, b, d, bytes](const TaskContext& c) {
                                 if (c.args<Replay>().update_step == 0) return ok_status();
                                 return c.stream->copy(rt->model.param_block(b), c.buffer(d), bytes,
                                                       gpu::CopyKind::kDeviceToDevice);
                               },
                               {gather});
  plan.reads(copy, d);
  plan.release(copy, d);
  return copy;
}

// Device optimizer: partition p's reduced gradient up (h2d) into a device buffer.
void UpdateLowering::add_grad_up(size_t p, std::vector<TaskId> deps) {
  const int64_t b = lay_.blocks[p];
  const int stage = lay_.stage;
  const BufferId g = stage >= 2 ? hb_.gshard[size_t(b)] : hb_.gfull[size_t(b)];
  const size_t grad_off = stage == 1 ? static_cast<size_t>(lay_.rank) * lay_.shard_bytes(b) : 0;
  const size_t bytes =
      static_cast<size_t>(rt_->opt.numel(p)) * (stage >= 2 ? lay_.acc_es() : lay_.es());
  largest_opt_ = std::max<uint64_t>(largest_opt_, round_device(bytes));
  const BufferId gdev =
      pb_.add_buffer(BufferKind::kOptimizerIo, "grad up " + lay_.name(b), Tier::kDevice, bytes);
  const TaskId gup = pb_.plan.add(
      "grad up " + lay_.name(b), Lane::kH2D,
      [rt = rt_, g, gdev, grad_off, bytes](const TaskContext& c) {
        if (c.args<Replay>().update_step == 0) return ok_status();
        rt->moved(Moved::kH2D, bytes);
        return c.stream->copy(c.buffer(gdev), static_cast<const std::byte*>(c.buffer(g)) + grad_off,
                              bytes, gpu::CopyKind::kHostToDevice);
      },
      std::move(deps));
  pb_.work(gup, sched::Work::kH2DBytes, double(bytes));
  pb_.plan.acquire(gup, gdev);
  pb_.plan.reads(gup, g);
  pb_.plan.writes(gup, gdev);
  grad_up_[p] = gup;
  grad_up_buf_[p] = gdev;
}

// Stage 3: the new shard of block b, written into pbuf by `after`, to its home (pinned: it is
// there already); returns the task after which it is there.
TaskId UpdateLowering::finish_shard(int64_t b, TaskId after) {
  const Home home = lay_.home[size_t(b)];
  if (home == Home::kPinned) return after;
  const BufferId u = hb_.pbuf[size_t(b)], d = hb_.dshard[size_t(b)];
  const size_t bytes = lay_.shard_bytes(b);
  const TaskId t =
      home == Home::kDevice
          ? pb_.plan.add("param shard up " + lay_.name(b), Lane::kH2D,
                         [rt = rt_, u, d, bytes](const TaskContext& c) -> Status {
                           if (c.args<Replay>().update_step == 0) return ok_status();
                           rt->moved(Moved::kH2D, bytes);
                           return c.stream->copy(c.buffer(d), c.buffer(u), bytes,
                                                 gpu::CopyKind::kHostToDevice);
                         },
                         {after})
          : pb_.plan.add(
                "write param shard " + lay_.name(b), Lane::kNvme,
                [rt = rt_, u, b, bytes](const TaskContext& c) -> Status {
                  if (c.args<Replay>().update_step == 0) return ok_status();
                  rt->moved(Moved::kNvmeWrite, bytes);
                  return rt->swap.store->write(rt->swap.shard(b), c.buffer(u), bytes).wait();
                },
                {after});
  if (home == Home::kDevice) {
    pb_.work(t, sched::Work::kH2DBytes, double(bytes));
  } else {
    pb_.nvme_work(t, sched::Work::kNvmeWriteBytes, double(bytes));
  }
  pb_.plan.reads(t, u);
  pb_.plan.release(t, u);
  if (d >= 0) pb_.plan.writes(t, d);
  return t;
}

// After `after` wrote partition p's new values into pbuf: a transient shard to its home (its
// staging acquired by `after`), a pinned or device shard home, a whole block gathered and up.
TaskId UpdateLowering::to_next_use(size_t p, int64_t b, TaskId after) {
  if (lay_.transient(b)) {
    t_.shard_acquirer[p] = after;
    t_.shard_home[p] = finish_shard(b, after);
    return t_.shard_home[p];
  }
  return lay_.sharded(b) ? finish_shard(b, after) : params_up(b, after);
}

TaskId UpdateLowering::add_tasks(size_t p, std::vector<TaskId> deps) {
  sched::Plan& plan = pb_.plan;
  const DType dt = lay_.dt;
  const int64_t b = lay_.blocks[p];
  const bool sharded = lay_.sharded(b);
  const BufferId g = lay_.stage >= 2 ? hb_.gshard[size_t(b)] : hb_.gfull[size_t(b)];
  const BufferId u = hb_.pbuf[size_t(b)];
  const BufferId st = staging_[p];
  // Where this rank's gradient and new parameters sit in those buffers.
  const size_t grad_off =
      lay_.stage == 1 ? static_cast<size_t>(lay_.rank) * lay_.shard_bytes(b) : 0;
  const size_t out_off =
      lay_.stage >= 1 && !sharded ? static_cast<size_t>(lay_.rank) * lay_.shard_bytes(b) : 0;
  const int64_t opt_numel = rt_->opt.numel(p);
  if (t_.read[p] >= 0) deps.push_back(t_.read[p]);
  if (rt_->device_opt && rt_->device_opt->on_device(p)) return add_device(p, std::move(deps));
  const TaskId adam = plan.add(
      "adam " + lay_.name(b), Lane::kCpu,
      [rt = rt_, p, g, u, st, grad_off, out_off, opt_numel, dt,
       gdt = lay_.stage >= 2 ? lay_.acc : dt](const TaskContext& c) -> Status {
        if (c.args<Replay>().update_step == 0) return ok_status();
        void* state = st >= 0 ? c.buffer(st) : nullptr;
        auto* out = static_cast<std::byte*>(c.buffer(u)) + out_off;
        PartitionGrad pg;
        pg.grads = static_cast<const std::byte*>(c.buffer(g)) + grad_off;
        pg.grad_dtype = gdt;
        pg.out16 = dt == DType::kF32 ? nullptr : out;
        pg.out_dtype = dt;
        STRATA_RETURN_IF_ERROR(rt->opt.step_partition(
            p, state, pg,
            cpu::AdamStep{c.args<Replay>().update_step, c.args<Replay>().update_grad_scale}));
        if (dt == DType::kF32) {
          std::memcpy(out, rt->opt.master_params(p, state), static_cast<size_t>(opt_numel) * 4);
        }
        return ok_status();
      },
      deps);
  pb_.work(adam, sched::Work::kAdamElements, double(opt_numel));
  plan.reads(adam, g);
  if (lay_.transient(b)) plan.acquire(adam, u);
  plan.writes(adam, u);
  t_.grad_reader[size_t(b)] = adam;
  if (st >= 0) {
    plan.reads(adam, st);
    plan.writes(adam, st);
    const TaskId write = plan.add("write state " + lay_.name(b), Lane::kNvme,
                                  [rt = rt_, p, st](const TaskContext& c) {
                                    if (c.args<Replay>().update_step == 0) return ok_status();
                                    rt->moved(Moved::kNvmeWrite, rt->opt.state_bytes(p));
                                    return rt->opt.write_partition(p, c.buffer(st)).wait();
                                  },
                                  {adam});
    pb_.nvme_work(write, sched::Work::kNvmeWriteBytes, double(rt_->opt.state_bytes(p)));
    plan.reads(write, st);
    plan.release(write, st);
    t_.state_written[p] = write;
  }
  // Stage 3: the new shard goes home; it is gathered with the block's next forward.
  return to_next_use(p, b, adam);
}

// add() of a partition the device optimizer updates (deps include its state read).
TaskId UpdateLowering::add_device(size_t p, std::vector<TaskId> deps) {
  sched::Plan& plan = pb_.plan;
  const DType dt = lay_.dt;
  const int64_t b = lay_.blocks[p];
  const bool sharded = lay_.sharded(b);
  const BufferId u = hb_.pbuf[size_t(b)];
  const size_t out_off =
      lay_.stage >= 1 && !sharded ? static_cast<size_t>(lay_.rank) * lay_.shard_bytes(b) : 0;
  const int64_t numel = rt_->opt.numel(p);
  const bool kept = lay_.grads_on_device(b);
  if (lay_.stage == 0 && (lay_.ranks == 1 || kept)) {
    // One rank at stage 0: the gradient is the model's own (a one-rank reduction is the
    // identity); kept on the device, the reduced gradient was copied back into it. Either way
    // still in its block when the rotated update runs before "zero grads".
    const TaskId t = plan.add(
        "adam " + lay_.name(b) + " (device)", Lane::kCompute,
        [rt = rt_, p, b, dt](const TaskContext& c) -> Status {
          if (c.args<Replay>().update_step == 0) return ok_status();
          return rt->device_opt->update(
              *c.stream, rt->opt, p, rt->model.grad_block(b), dt, rt->model.param_block(b), dt,
              cpu::AdamStep{c.args<Replay>().update_step, c.args<Replay>().update_grad_scale});
        },
        deps);
    pb_.work(t, sched::Work::kDeviceAdamElements, double(numel));
    return t;
  }
  // The rank's reduced gradient up (or kept on the device); Adam on the compute lane (before any
  // forward: the lane runs in order); the new values into the model's block (stage 0) or down
  // into pbuf.
  const size_t bytes = static_cast<size_t>(numel) * lay_.es();
  if (!kept && grad_up_[p] < 0) add_grad_up(p, deps);
  const BufferId gdev = kept ? hb_.dgrad[size_t(b)] : grad_up_buf_[p];
  if (!kept) deps = {grad_up_[p]};
  // Where the new values go: the model's block (stage 0), the device-homed shard in place or the
  // rank's slot of the padded device copy (Layout::new_params_on_device), else a device buffer
  // that goes down into pbuf.
  const bool stays = lay_.new_params_on_device(b);
  BufferId odev = -1;
  size_t odev_off = 0;
  if (stays && sharded) {
    odev = hb_.dshard[size_t(b)];
  } else if (stays) {
    odev = device_copy(b);
    odev_off = static_cast<size_t>(lay_.rank) * lay_.shard_bytes(b);
  } else if (lay_.stage >= 1) {
    odev = pb_.add_buffer(BufferKind::kOptimizerIo, "new params " + lay_.name(b), Tier::kDevice,
                          bytes);
  }
  // The budget's room for the device optimizer's buffers in flight (the gradients' sets it
  // otherwise).
  if (kept && odev >= 0 && !(stays && sharded)) {
    largest_opt_ =
        std::max<uint64_t>(largest_opt_, round_device(stays ? lay_.padded_bytes(b) : bytes));
  }
  const TaskId dadam = plan.add(
      "adam " + lay_.name(b) + " (device)", Lane::kCompute,
      [rt = rt_, p, b, gdev, odev, odev_off, dt,
       gdt = lay_.stage >= 2 ? lay_.acc : dt](const TaskContext& c) -> Status {
        if (c.args<Replay>().update_step == 0) return ok_status();
        return rt->device_opt->update(
            *c.stream, rt->opt, p, c.buffer(gdev), gdt,
            odev >= 0 ? static_cast<std::byte*>(c.buffer(odev)) + odev_off
                      : rt->model.param_block(b),
            dt, cpu::AdamStep{c.args<Replay>().update_step, c.args<Replay>().update_grad_scale});
      },
      deps);
  pb_.work(dadam, sched::Work::kDeviceAdamElements, double(numel));
  plan.reads(dadam, gdev);
  if (kept) {
    t_.grad_reader[size_t(b)] = dadam;
  } else {
    plan.release(dadam, gdev);
  }
  if (odev < 0) return dadam;  // stage 0: the model's block is updated in place
  if (stays && sharded) {      // its home, written in place
    plan.writes(dadam, odev);
    return dadam;
  }
  plan.acquire(dadam, odev);
  plan.writes(dadam, odev);
  if (stays) return gather_on_device(b, odev, dadam);
  const TaskId down =
      plan.add("new params down " + lay_.name(b), Lane::kD2H,
               [rt = rt_, u, odev, out_off, bytes](const TaskContext& c) {
                 if (c.args<Replay>().update_step == 0) return ok_status();
                 rt->moved(Moved::kD2H, bytes);
                 return c.stream->copy(static_cast<std::byte*>(c.buffer(u)) + out_off,
                                       c.buffer(odev), bytes, gpu::CopyKind::kDeviceToHost);
               },
               {dadam});
  pb_.work(down, sched::Work::kD2HBytes, double(bytes));
  plan.reads(down, odev);
  plan.release(down, odev);
  if (lay_.transient(b)) plan.acquire(down, u);
  plan.writes(down, u);
  return to_next_use(p, b, down);
}

}  // namespace strata::engine::zero
