#include "engine/zero/plan/lower_grads.h"

#include <cstring>
#include <string>

#include "core/check.h"
#include "engine/offload_step.h"
#include "gpu/kernels.h"

namespace strata::engine::zero {

using sched::BufferId;
using sched::Lane;
using sched::TaskContext;
using sched::TaskId;

namespace {
// dst[i] += src[i] for n elements, dst of `acc`, src of `dt` (the sum rounded to `acc`: the
// model's 16-bit type as the device's adds, or fp32).
void add_into(void* dst, DType acc, const void* src, DType dt, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    store_from_f32(dst, acc, i, load_as_f32(dst, acc, i) + load_as_f32(src, dt, i));
  }
}

// +Inf as one element of `dt` at `at`.
void write_inf(void* at, DType dt) {
  const uint32_t f32 = 0x7F800000u;
  const uint16_t f16 = 0x7C00u, bf16 = 0x7F80u;
  if (dt == DType::kF32) std::memcpy(at, &f32, 4);
  if (dt == DType::kF16) std::memcpy(at, &f16, 2);
  if (dt == DType::kBF16) std::memcpy(at, &bf16, 2);
}
// +Inf as the first element of `dt` at `at` on the device, byte by byte (no host buffer to copy
// from).
Status write_inf_on_device(gpu::Stream& s, std::byte* at, DType dt) {
  std::byte inf[4];
  write_inf(inf, dt);
  for (size_t i = 0; i < dtype_size(dt); ++i) {
    STRATA_RETURN_IF_ERROR(s.memset(at + i, int(inf[i]), 1));
  }
  return ok_status();
}
// Skips a replay that has no gradient to move: flushing, or below stage 2 (which reduce after the
// last micro-batch only) any but the last micro-batch.
bool no_gradient(const TaskContext& c, int stage) {
  return c.args<Replay>().flushing || (stage <= 1 && !c.args<Replay>().last_micro());
}
}  // namespace

GradLowering::GradLowering(PlanBuilder& pb, const Layout& lay, const HostBuffers& hb,
                           const OpBuffers& ob, UpdateLowering& updates, Runtime* rt)
    : pb_(pb),
      lay_(lay),
      hb_(hb),
      dgrad_(ob.dgrad),
      dbucket_(ob.dbucket),
      updates_(updates),
      rt_(rt) {
  checks_.assign(lay.nb(), -1);
  added_.assign(lay.nb(), -1);
}

void GradLowering::chain(int64_t gb, int slot, TaskId t) {
  if (lay_.grads_on_device(gb)) {
    keep_on_device(gb, slot, t);
    return;
  }
  check(gb, slot, lay_.on_device ? reduce_on_device(gb, slot, t) : reduce_on_host(gb, slot, t));
}

TaskId GradLowering::reduce_on_host(int64_t gb, int slot, TaskId t) {
  sched::Plan& plan = pb_.plan;
  const int stage = lay_.stage;
  const DType dt = lay_.dt;
  const size_t es = lay_.es();
  const int rank = lay_.rank, ranks = lay_.ranks;
  const BufferId gf = hb_.gfull[lay_.at(slot, gb)];
  const BufferId gs = hb_.gshard[size_t(gb)];
  const size_t c16 = static_cast<size_t>(lay_.shard(gb));
  const size_t bytes = lay_.block_bytes(gb);
  const BufferId dg = dgrad_[lay_.at(slot, gb)];
  const std::string what = lay_.name(gb) + lay_.slot_name(slot);
  // Which micro-batch's gradient this is: the slot's (segment-major, one replay), else the
  // replay's.
  const int fixed = lay_.slots > 1 ? slot : -1;
  const TaskId down =
      plan.add("grads down " + what, Lane::kD2H,
               [rt = rt_, gb, gf, dg, bytes, stage](const TaskContext& c) -> Status {
                 if (c.args<Replay>().flushing || (stage <= 1 && !c.args<Replay>().last_micro()))
                   return ok_status();
                 rt->moved(Moved::kD2H, bytes);
                 const void* src = dg >= 0 ? c.buffer(dg) : rt->model.grad_block(gb);
                 return c.stream->copy(c.buffer(gf), src, bytes, gpu::CopyKind::kDeviceToHost);
               },
               {t});
  pb_.work(down, sched::Work::kD2HBytes, double(bytes));
  if (stage <= 1) pb_.task_runs_when(down, RunsWhen::kLastMicro);
  // Delayed, the previous step's update may still be reading this block's gradient buffers.
  const TaskId reader = updates_.tasks().grad_reader[size_t(gb)];
  if (lay_.delayed && reader >= 0) plan.depend(down, reader);
  if (stage >= 2) {
    plan.acquire(down, gf);
    plan.reads(down, dg);
    plan.release(down, dg);
  }
  plan.writes(down, gf);
  const size_t real = static_cast<size_t>(lay_.numel(gb));
  const TaskId reduce =
      plan.add("reduce " + what, Lane::kComm,
               [rt = rt_, gf, gs, gb, c16, real, dt, acc = lay_.acc, es, stage, rank, ranks,
                fixed](const TaskContext& c) -> Status {
                 if (c.args<Replay>().flushing || (stage <= 1 && !c.args<Replay>().last_micro()))
                   return ok_status();
                 auto* full = static_cast<std::byte*>(c.buffer(gf));
                 if (gb == 0 && c.args<Replay>().step == rt->inject_inf_step) write_inf(full, dt);
                 const size_t total = c16 * static_cast<size_t>(ranks);
                 std::memset(full + real * es, 0, (total - real) * es);  // the padding takes part
                 comm::CollectiveCall call;
                 call.kind = comm::CollectiveKind::kReduceScatter;
                 call.send = full;
                 std::byte* own = full + static_cast<size_t>(rank) * c16 * es;
                 // A later micro-batch's shard goes to its place in `full`, then into gs (as
                 // the first one does when gs is of another dtype: fp32 accumulation).
                 const int micro = fixed >= 0 ? fixed : c.args<Replay>().micro;
                 const bool add = gs >= 0 && micro > 0;
                 const bool convert = gs >= 0 && !add && acc != dt;
                 call.recv = gs >= 0 && !add && !convert ? c.buffer(gs) : own;
                 call.count = c16;
                 call.dtype = dt;
                 rt->count(call, &ZeroTraffic::grad_reduce_scatter);
                 STRATA_RETURN_IF_ERROR(rt->comm.start(call).wait());
                 if (convert) ::strata::convert(own, dt, c.buffer(gs), acc, c16);
                 if (add) add_into(c.buffer(gs), acc, own, dt, c16);
                 if (stage != 0) return ok_status();
                 comm::CollectiveCall gather = call;  // stage 0: the other half of the all-reduce
                 gather.kind = comm::CollectiveKind::kAllGather;
                 gather.send = call.recv;
                 gather.recv = full;
                 rt->count(gather, &ZeroTraffic::grad_all_gather);
                 return rt->comm.start(gather).wait();
               },
               {down});
  pb_.collective_work(reduce, comm::CollectiveKind::kReduceScatter, c16, dt, rank, ranks);
  if (stage <= 1) pb_.task_runs_when(reduce, RunsWhen::kLastMicro);
  if (stage == 0) {
    pb_.collective_work(reduce, comm::CollectiveKind::kAllGather, c16, dt, rank, ranks);
  }
  plan.reads(reduce, gf);
  plan.writes(reduce, gf);
  if (gs >= 0) {
    plan.reads(reduce, gs);  // a later micro-batch adds into it
    plan.writes(reduce, gs);
    plan.release(reduce, gf);
  }
  return reduce;
}

TaskId GradLowering::reduce_in_device_buffer(int64_t gb, int slot, TaskId t, BufferId& dbuf) {
  sched::Plan& plan = pb_.plan;
  const int stage = lay_.stage;
  const DType dt = lay_.dt;
  const size_t es = lay_.es();
  const int rank = lay_.rank;
  const size_t c16 = static_cast<size_t>(lay_.shard(gb));
  const size_t own = static_cast<size_t>(rank) * c16 * es;  // the rank's shard in a padded copy
  const size_t bytes = lay_.block_bytes(gb), padded = lay_.padded_bytes(gb);
  const std::string what = lay_.name(gb) + lay_.slot_name(slot);
  const bool last_only = stage <= 1;  // stages 0-1 reduce after the last micro-batch only
  auto skip = [stage](const TaskContext& c) { return no_gradient(c, stage); };
  // Stages 0-1: the model's gradient into its padded bucket (the padding zero; the test hook's
  // Inf before the reduction, as every rank's stage 0 check needs).
  // Stages 2-3: the op's padded gradient buffer, its padding zeroed with it.
  dbuf = dgrad_[lay_.at(slot, gb)];
  TaskId before = t;
  if (stage <= 1) {
    dbuf = dbucket_[size_t(gb)];
    before = plan.add("grad bucket " + what, Lane::kCompute,
                      [rt = rt_, gb, dbuf, bytes, padded, skip](const TaskContext& c) -> Status {
                        if (skip(c)) return ok_status();
                        auto* d = static_cast<std::byte*>(c.buffer(dbuf));
                        STRATA_RETURN_IF_ERROR(c.stream->copy(d, rt->model.grad_block(gb), bytes,
                                                              gpu::CopyKind::kDeviceToDevice));
                        if (padded > bytes)
                          STRATA_RETURN_IF_ERROR(c.stream->memset(d + bytes, 0, padded - bytes));
                        if (gb != 0 || c.args<Replay>().step != rt->inject_inf_step)
                          return ok_status();
                        return write_inf_on_device(*c.stream, d, rt->model.dtype());
                      },
                      {t});
    pb_.task_runs_when(before, RunsWhen::kLastMicro);
    plan.acquire(before, dbuf);
    plan.writes(before, dbuf);
  }
  const comm::CollectiveCall call = collective(comm::CollectiveKind::kReduceScatter, c16, dt);
  const TaskId reduce = plan.add(
      "reduce " + what, rt_->device_lane(),
      [rt = rt_, dbuf, own, call, stage, skip](const TaskContext& c) -> Status {
        if (skip(c)) return ok_status();
        auto* d = static_cast<std::byte*>(c.buffer(dbuf));
        comm::CollectiveCall rs = call;
        rs.send = d;
        rs.recv = d + own;
        STRATA_RETURN_IF_ERROR(rt->on_device(rs, &ZeroTraffic::grad_reduce_scatter, c.stream));
        if (stage != 0) return ok_status();
        comm::CollectiveCall ag = rs;  // stage 0: the other half of the all-reduce
        ag.kind = comm::CollectiveKind::kAllGather;
        ag.send = d + own;
        ag.recv = d;
        return rt->on_device(ag, &ZeroTraffic::grad_all_gather, c.stream);
      },
      {before});
  pb_.collective_work(reduce, comm::CollectiveKind::kReduceScatter, c16, dt, rank, lay_.ranks,
                      true);
  if (stage == 0) {
    pb_.collective_work(reduce, comm::CollectiveKind::kAllGather, c16, dt, rank, lay_.ranks, true);
  }
  if (last_only) pb_.task_runs_when(reduce, RunsWhen::kLastMicro);
  plan.reads(reduce, dbuf);
  plan.writes(reduce, dbuf);
  return reduce;
}

TaskId GradLowering::reduce_on_device(int64_t gb, int slot, TaskId t) {
  sched::Plan& plan = pb_.plan;
  const int stage = lay_.stage;
  const DType dt = lay_.dt;
  const size_t es = lay_.es();
  const BufferId gf = hb_.gfull[lay_.at(slot, gb)];
  const BufferId gs = hb_.gshard[size_t(gb)];
  const size_t c16 = static_cast<size_t>(lay_.shard(gb));
  const size_t own = static_cast<size_t>(lay_.rank) * c16 * es;
  const size_t padded = lay_.padded_bytes(gb);
  const std::string what = lay_.name(gb) + lay_.slot_name(slot);
  const bool last_only = stage <= 1;
  auto skip = [stage](const TaskContext& c) { return no_gradient(c, stage); };
  BufferId dbuf = -1;
  const TaskId reduce = reduce_in_device_buffer(gb, slot, t, dbuf);
  // Down: stage 0 the whole reduced gradient, stage 1 the rank's shard into its place in the
  // whole one, stages 2-3 the shard into its landing place.
  const size_t from = stage == 0 ? 0 : own, to = stage == 1 ? own : 0;
  const size_t down_bytes = stage == 0 ? padded : c16 * es;
  const TaskId down =
      plan.add("grads down " + what, Lane::kD2H,
               [rt = rt_, gf, dbuf, from, to, down_bytes, skip](const TaskContext& c) -> Status {
                 if (skip(c)) return ok_status();
                 rt->moved(Moved::kD2H, down_bytes);
                 return c.stream->copy(static_cast<std::byte*>(c.buffer(gf)) + to,
                                       static_cast<const std::byte*>(c.buffer(dbuf)) + from,
                                       down_bytes, gpu::CopyKind::kDeviceToHost);
               },
               {reduce});
  pb_.work(down, sched::Work::kD2HBytes, double(down_bytes));
  if (last_only) pb_.task_runs_when(down, RunsWhen::kLastMicro);
  // Delayed, the previous step's update may still be reading this block's gradient buffers.
  const TaskId reader = updates_.tasks().grad_reader[size_t(gb)];
  if (lay_.delayed && reader >= 0) plan.depend(down, reader);
  plan.reads(down, dbuf);
  plan.release(down, dbuf);
  if (stage >= 2) plan.acquire(down, gf);
  plan.writes(down, gf);
  if (stage <= 1) return down;
  // Stages 2-3: the shard into the rank's (added from the second micro-batch on, converted to
  // fp32 with fp32 accumulation), as the comm task does with the collectives on the host.
  const int fixed = lay_.slots > 1 ? slot : -1;
  const TaskId acc = plan.add(
      "add grad shard " + what, Lane::kCpu,
      [rt = rt_, gf, gs, gb, c16, dt, acc = lay_.acc, es, fixed](const TaskContext& c) -> Status {
        if (c.args<Replay>().flushing) return ok_status();
        void* land = c.buffer(gf);
        if (gb == 0 && c.args<Replay>().step == rt->inject_inf_step) write_inf(land, dt);
        const int micro = fixed >= 0 ? fixed : c.args<Replay>().micro;
        if (micro > 0) {
          add_into(c.buffer(gs), acc, land, dt, c16);
        } else if (acc != dt) {
          ::strata::convert(land, dt, c.buffer(gs), acc, c16);
        } else {
          std::memcpy(c.buffer(gs), land, c16 * es);
        }
        return ok_status();
      },
      {down});
  pb_.work(acc, sched::Work::kHostBytes, double(c16 * (es + lay_.acc_es())));
  // Segment-major, the slots add up in micro-batch order.
  TaskId& previous = added_[size_t(gb)];
  if (previous >= 0) plan.depend(acc, previous);
  previous = acc;
  plan.reads(acc, gf);
  plan.release(acc, gf);
  plan.reads(acc, gs);
  plan.writes(acc, gs);
  return acc;
}

// The tasks after the reduction run on the d2h lane, a stream beside the compute lane's (where
// the gradients went down before): the backward goes on while they run, as it does while a
// gradient goes down.
void GradLowering::keep_on_device(int64_t gb, int slot, TaskId t) {
  STRATA_CHECK(lay_.rotate,
               "a gradient kept on the device is checked before the next step's update");
  sched::Plan& plan = pb_.plan;
  const int stage = lay_.stage;
  const DType dt = lay_.dt;
  const size_t es = lay_.es();
  const size_t c16 = static_cast<size_t>(lay_.shard(gb));
  const size_t own = static_cast<size_t>(lay_.rank) * c16 * es;
  const std::string what = lay_.name(gb) + lay_.slot_name(slot);
  const BufferId dg = hb_.dgrad[size_t(gb)];
  BufferId dbuf = -1;
  const TaskId reduce = reduce_in_device_buffer(gb, slot, t, dbuf);
  if (stage == 0) {  // every rank's shard checked in the bucket, then the whole gradient kept
    const TaskId chk = check_on_device(gb, dbuf, dt, reduce);
    const size_t bytes = lay_.block_bytes(gb);
    const TaskId keep = plan.add("keep grad " + what, Lane::kD2H,
                                 [rt = rt_, gb, dbuf, bytes](const TaskContext& c) -> Status {
                                   if (no_gradient(c, 0)) return ok_status();
                                   return c.stream->copy(rt->model.grad_block(gb), c.buffer(dbuf),
                                                         bytes, gpu::CopyKind::kDeviceToDevice);
                                 },
                                 {chk});
    pb_.task_runs_when(keep, RunsWhen::kLastMicro);
    pb_.work(keep, sched::Work::kDeviceBytes, double(2 * bytes));
    plan.reads(keep, dbuf);
    plan.release(keep, dbuf);
    return;
  }
  // Stage 1: the rank's shard kept (in dt). Stages 2-3: added into the kept shard, in acc (from
  // the second micro-batch on; converted to fp32 with fp32 accumulation), as the host does.
  const int fixed = lay_.slots > 1 ? slot : -1;
  const TaskId keep =
      plan.add((stage == 1 ? "keep grad shard " : "add grad shard ") + what, Lane::kD2H,
               [rt = rt_, dbuf, dg, own, c16, gb, dt, acc = stage == 1 ? dt : lay_.acc, stage,
                fixed](const TaskContext& c) -> Status {
                 if (no_gradient(c, stage)) return ok_status();
                 auto* shard = static_cast<std::byte*>(c.buffer(dbuf)) + own;
                 if (stage >= 2 && gb == 0 && c.args<Replay>().step == rt->inject_inf_step) {
                   STRATA_RETURN_IF_ERROR(write_inf_on_device(*c.stream, shard, dt));
                 }
                 gpu::Kernels& k = rt->model.device().kernels();
                 const int micro = fixed >= 0 ? fixed : c.args<Replay>().micro;
                 const auto n = static_cast<int64_t>(c16);
                 if (stage >= 2 && micro > 0)
                   return k.accumulate(*c.stream, c.buffer(dg), acc, shard, dt, n);
                 return k.cast(*c.stream, c.buffer(dg), acc, shard, dt, n);
               },
               {reduce});
  if (stage == 1) pb_.task_runs_when(keep, RunsWhen::kLastMicro);
  // Read and written: a cast, or a sum (stages 2-3, a slot after the first; a plan replayed once
  // a micro-batch, fixed < 0, is priced as its first replay's cast).
  const bool sums = stage >= 2 && fixed > 0;
  const size_t kept_es = stage == 1 ? es : lay_.acc_es();
  pb_.work(keep, sched::Work::kDeviceBytes, double(c16 * (es + (sums ? 2 : 1) * kept_es)));
  // Segment-major, the slots add up in micro-batch order.
  TaskId& previous = added_[size_t(gb)];
  if (previous >= 0) plan.depend(keep, previous);
  previous = keep;
  plan.reads(keep, dbuf);
  plan.release(keep, dbuf);
  if (stage >= 2) plan.reads(keep, dg);
  plan.writes(keep, dg);
  if (slot + 1 == lay_.slots) check_on_device(gb, dg, stage == 1 ? dt : lay_.acc, keep);
}

// The check of a gradient kept on the device: Kernels::grad_stats (grad_check's bits) of the
// rank's shard (stage 0: of every rank's, in the padded bucket) into dstats, copied to hstats;
// the statistics task of norm() takes them from there.
TaskId GradLowering::check_on_device(int64_t gb, BufferId src, DType cdt, TaskId after) {
  sched::Plan& plan = pb_.plan;
  const int stage = lay_.stage;
  const int rank = lay_.rank, ranks = lay_.ranks;
  const size_t c16 = static_cast<size_t>(lay_.shard(gb));
  const BufferId ds = hb_.dstats, hs = hb_.hstats;
  TaskId& chk = checks_[size_t(gb)];
  chk = plan.add(
      "check " + lay_.name(gb) + " (device)", Lane::kD2H,
      [rt = rt_, src, ds, hs, gb, c16, cdt, stage, rank, ranks](const TaskContext& c) -> Status {
        if (c.args<Replay>().flushing || !c.args<Replay>().last_micro()) return ok_status();
        gpu::Kernels& k = rt->model.device().kernels();
        const auto* base = static_cast<const std::byte*>(c.buffer(src));
        // [block][rank][2]: stage 0's statistics of every rank's shard come down in one copy.
        const size_t first = size_t(gb) * size_t(ranks) * 2;
        const int lo = stage == 0 ? 0 : rank, hi = stage == 0 ? ranks : rank + 1;
        auto* d = static_cast<double*>(c.buffer(ds)) + first;
        for (int r = lo; r < hi; ++r) {
          const std::byte* at = stage == 0 ? base + size_t(r) * c16 * dtype_size(cdt) : base;
          STRATA_RETURN_IF_ERROR(k.grad_stats(*c.stream, d + size_t(r) * 2, at, int64_t(c16), cdt));
        }
        const size_t bytes = size_t(hi - lo) * 2 * sizeof(double);
        rt->moved(Moved::kD2H, bytes);
        return c.stream->copy(static_cast<double*>(c.buffer(hs)) + first + size_t(lo) * 2,
                              d + size_t(lo) * 2, bytes, gpu::CopyKind::kDeviceToHost);
      },
      {after});
  pb_.task_runs_when(chk, RunsWhen::kLastMicro);
  pb_.work(chk, sched::Work::kD2HBytes, double(16 * (stage == 0 ? ranks : 1)));
  pb_.work(chk, sched::Work::kDeviceBytes,
           double(c16 * dtype_size(cdt) * (stage == 0 ? ranks : 1)));
  plan.reads(chk, src);
  plan.writes(chk, ds);
  plan.writes(chk, hs);
  kept_checks_.push_back(chk);
  return chk;
}

// After `reduced`, the last slot's check: the sums of squares of the reduced shards this rank
// holds.
void GradLowering::check(int64_t gb, int slot, TaskId reduced) {
  if (slot + 1 < lay_.slots) return;  // the last slot's reduction completes the shard
  sched::Plan& plan = pb_.plan;
  const int stage = lay_.stage;
  const DType dt = lay_.dt;
  const size_t es = lay_.es();
  const int rank = lay_.rank, ranks = lay_.ranks;
  const BufferId gf = hb_.gfull[lay_.at(slot, gb)];
  const BufferId gs = hb_.gshard[size_t(gb)];
  const size_t c16 = static_cast<size_t>(lay_.shard(gb));
  const BufferId src = gs >= 0 ? gs : gf;
  const DType cdt = gs >= 0 ? lay_.acc : dt;  // the checked shard's dtype
  TaskId& chk = checks_[size_t(gb)];
  chk = plan.add("check " + lay_.name(gb), Lane::kCpu,
                 [rt = rt_, src, gb, c16, cdt, es, stage, rank, ranks,
                  rotate = lay_.rotate](const TaskContext& c) -> Status {
                   if (c.args<Replay>().flushing || !c.args<Replay>().last_micro())
                     return ok_status();
                   const auto* base = static_cast<const std::byte*>(c.buffer(src));
                   for (int r = 0; r < ranks; ++r) {
                     if (stage != 0 && r != rank) continue;
                     const std::byte* at =
                         stage == 0 || stage == 1 ? base + static_cast<size_t>(r) * c16 * es : base;
                     const cpu::GradStats s = cpu::grad_check(at, cdt, static_cast<int64_t>(c16));
                     double* out = rt->stats.at(r, size_t(gb));
                     out[0] = s.sum_squares;
                     out[1] = s.has_nonfinite ? 1.0 : 0.0;
                     // Not rotated, the block's Adam follows at once: a non-finite gradient
                     // (an error without fp16) must stop the step before it reaches the
                     // state.
                     if (!rotate && s.has_nonfinite)
                       return nonfinite_gradient_error(c.args<Replay>().step);
                   }
                   return ok_status();
                 },
                 {reduced});
  pb_.task_runs_when(chk, RunsWhen::kLastMicro);
  pb_.work(chk, sched::Work::kHostBytes,
           double(c16 * (gs >= 0 ? lay_.acc_es() : es) * size_t(stage == 0 ? ranks : 1)));
  plan.reads(chk, src);
  // Not rotated: the block's update right after its own check (the next step's forward comes
  // after this replay anyway).
  if (!lay_.rotate) updates_.add(lay_.part_of[size_t(gb)], {chk});
}

// The statistics of every shard on every rank (stages 1-3), then the norm in a fixed order.
void GradLowering::norm() {
  sched::Plan& plan = pb_.plan;
  std::vector<TaskId> norm_deps = checks_;
  const int ranks = lay_.ranks;
  const size_t nb = lay_.nb();
  if (!kept_checks_.empty()) {
    // The statistics of the gradients kept on the device into the host's, from pinned memory.
    const BufferId hs = hb_.hstats;
    // (from, to): [block][rank][2] in hstats, [rank][block][2] in the step's statistics.
    std::vector<std::pair<size_t, size_t>> slots;
    for (size_t b = 0; b < nb; ++b) {
      for (int r = 0; r < ranks && lay_.grads_on_device(int64_t(b)); ++r) {
        if (lay_.stage == 0 || r == lay_.rank)
          slots.emplace_back((b * size_t(ranks) + size_t(r)) * 2, (size_t(r) * nb + b) * 2);
      }
    }
    const TaskId stats = plan.add(
        "statistics from the device", Lane::kCpu,
        [rt = rt_, hs, slots](const TaskContext& c) -> Status {
          if (c.args<Replay>().flushing || !c.args<Replay>().last_micro()) return ok_status();
          const auto* from = static_cast<const double*>(c.buffer(hs));
          for (const auto& [at, to] : slots)
            std::memcpy(&rt->stats.slots[to], from + at, 2 * sizeof(double));
          return ok_status();
        },
        kept_checks_);
    pb_.task_runs_when(stats, RunsWhen::kLastMicro);
    plan.reads(stats, hs);
    norm_deps.clear();
    for (size_t b = 0; b < nb; ++b) {
      if (!lay_.grads_on_device(int64_t(b))) norm_deps.push_back(checks_[b]);
    }
    norm_deps.push_back(stats);
  }
  if (lay_.stage >= 1 && ranks > 1) {
    // Raw bits: doubles moved as 16-bit words (a gather moves, it does not convert).
    comm::CollectiveCall gather;
    gather.kind = comm::CollectiveKind::kAllGather;
    gather.count = nb * 2 * sizeof(double) / 2;
    gather.dtype = DType::kBF16;
    const TaskId exchange = plan.add(
        "exchange statistics", Lane::kComm,
        [rt = rt_, gather](const TaskContext& c) -> Status {
          if (c.args<Replay>().flushing || !c.args<Replay>().last_micro()) return ok_status();
          comm::CollectiveCall call = gather;
          call.send = rt->stats.at(rt->rank, 0);
          call.recv = rt->stats.slots.data();
          rt->count(call, &ZeroTraffic::stats);
          return rt->comm.start(call).wait();
        },
        norm_deps);
    pb_.task_runs_when(exchange, RunsWhen::kLastMicro);
    pb_.work(exchange, sched::Work::kNetCalls, 1.0);
    pb_.work(exchange, sched::Work::kNetBytes,
             double(comm::textbook_bytes(gather, lay_.rank, ranks).sent));
    norm_deps = {exchange};
  }
  const TaskId first = pb_.next_task();
  plan.add(
      "norm", Lane::kCpu,
      [rt = rt_, nb, ranks](const TaskContext& c) {
        if (c.args<Replay>().flushing || !c.args<Replay>().last_micro()) return ok_status();
        double sum = 0.0;
        bool finite = true;
        for (size_t b = 0; b < nb; ++b) {
          for (int r = 0; r < ranks; ++r) {
            const double* s = rt->stats.at(r, b);
            sum += s[0];
            finite = finite && s[1] == 0.0;
          }
        }
        rt->stats.sum = sum;
        rt->stats.finite = finite;
        return ok_status();
      },
      norm_deps);
  pb_.runs_when(first, RunsWhen::kLastMicro);
}

}  // namespace strata::engine::zero
