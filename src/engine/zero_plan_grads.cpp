// ZeroStep::build_plan, the gradients: after the op that completes a block's gradient, its
// transfer to pinned memory, its reduction (comm) and its check (cpu), and (not rotated) the
// block's update; after the last check, the statistics exchange and the norm. With gradient
// accumulation, stages 0-1 move and reduce the gradients after the last micro-batch only;
// stages 2-3 reduce every micro-batch's and add the shard into the rank's; the checks and the
// norm run after the last.
#include <cstring>
#include <string>

#include "engine/zero_plan_build.h"

namespace strata::engine {

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
}  // namespace

// The gradient of block gb (its slot `slot`) is complete after task t: down, reduce, and after
// the last slot's reduction the check.
void ZeroStep::emit_grad_chain(PlanBuild& pb, int64_t gb, int slot, TaskId t) {
  model::Model& m = rt_->model;
  sched::Plan& plan = pb.plan;
  const int stage = pb.stage;
  const DType dt = pb.dt;
  const size_t es = pb.es;
  const int rank = pb.rank;
  const BufferId gf = pb.gfull[pb.at(slot, gb)];
  const size_t bytes = static_cast<size_t>(pb.numel(gb)) * es;
  const BufferId dg = pb.dgrad[pb.at(slot, gb)];
  const std::string what = pb.name(gb) + pb.slot_name(slot);
  // Which micro-batch's gradient this is: the slot's (segment-major, one replay), else the
  // replay's.
  const int fixed = pb.slots > 1 ? slot : -1;
  const TaskId down = plan.add(
      "grads down " + what, Lane::kD2H,
      [rt = rt_.get(), &m, gb, gf, dg, bytes, stage](const TaskContext& c) -> Status {
        if (c.args<zero::Replay>().flushing || (stage <= 1 && !c.args<zero::Replay>().last_micro()))
          return ok_status();
        rt->moved(zero::Moved::kD2H, bytes);
        const void* src = dg >= 0 ? c.buffer(dg) : m.grad_block(gb);
        return c.stream->copy(c.buffer(gf), src, bytes, gpu::CopyKind::kDeviceToHost);
      },
      {t});
  pb.work(down, sched::Work::kD2HBytes, double(bytes));
  if (stage <= 1) pb.task_runs_when(down, RunsWhen::kLastMicro);
  // Delayed, the previous step's update may still be reading this block's gradient buffers.
  if (pb.delayed && pb.grad_reader[size_t(gb)] >= 0) plan.depend(down, pb.grad_reader[size_t(gb)]);
  if (stage >= 2) {
    plan.acquire(down, gf);
    plan.reads(down, dg);
    plan.release(down, dg);
  }
  plan.writes(down, gf);
  const BufferId gs = pb.gshard[size_t(gb)];
  const size_t c16 = static_cast<size_t>(pb.shard(gb));
  const size_t real = static_cast<size_t>(pb.numel(gb));
  const TaskId reduce = plan.add(
      "reduce " + what, Lane::kComm,
      [rt = rt_.get(), gf, gs, gb, c16, real, dt, acc = pb.acc, es, stage, rank,
       fixed](const TaskContext& c) -> Status {
        if (c.args<zero::Replay>().flushing || (stage <= 1 && !c.args<zero::Replay>().last_micro()))
          return ok_status();
        auto* full = static_cast<std::byte*>(c.buffer(gf));
        if (gb == 0 && c.args<zero::Replay>().step == rt->inject_inf_step) write_inf(full, dt);
        const size_t total = c16 * static_cast<size_t>(rt->ranks);
        std::memset(full + real * es, 0, (total - real) * es);  // the padding takes part
        comm::CollectiveCall call;
        call.kind = comm::CollectiveKind::kReduceScatter;
        call.send = full;
        std::byte* own = full + static_cast<size_t>(rank) * c16 * es;
        // A later micro-batch's shard goes to its place in `full`, then into gs (as
        // the first one does when gs is of another dtype: fp32 accumulation).
        const int micro = fixed >= 0 ? fixed : c.args<zero::Replay>().micro;
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
  pb.collective_work(reduce, comm::CollectiveKind::kReduceScatter, c16);
  if (stage <= 1) pb.task_runs_when(reduce, RunsWhen::kLastMicro);
  if (stage == 0) pb.collective_work(reduce, comm::CollectiveKind::kAllGather, c16);
  plan.reads(reduce, gf);
  plan.writes(reduce, gf);
  if (gs >= 0) {
    plan.reads(reduce, gs);  // a later micro-batch adds into it
    plan.writes(reduce, gs);
    plan.release(reduce, gf);
  }
  if (slot + 1 < pb.slots) return;  // the last slot's reduction completes the shard
  // The check: the sums of squares of the reduced shards this rank holds.
  const BufferId src = gs >= 0 ? gs : gf;
  const DType cdt = gs >= 0 ? pb.acc : dt;  // the checked shard's dtype
  pb.checks[size_t(gb)] =
      plan.add("check " + pb.name(gb), Lane::kCpu,
               [rt = rt_.get(), src, gb, c16, cdt, es, stage, rank,
                rotate = rotate_](const TaskContext& c) -> Status {
                 if (c.args<zero::Replay>().flushing || !c.args<zero::Replay>().last_micro())
                   return ok_status();
                 const auto* base = static_cast<const std::byte*>(c.buffer(src));
                 for (int r = 0; r < rt->ranks; ++r) {
                   if (stage != 0 && r != rank) continue;
                   const std::byte* at =
                       stage == 0 || stage == 1 ? base + static_cast<size_t>(r) * c16 * es : base;
                   const cpu::GradStats s = cpu::grad_check(at, cdt, static_cast<int64_t>(c16));
                   double* out = rt->stats.at(r, size_t(gb));
                   out[0] = s.sum_squares;
                   out[1] = s.has_nonfinite ? 1.0 : 0.0;
                   // Not rotated, the block's Adam follows at once: a non-finite gradient (an
                   // error without fp16) must stop the step before it reaches the state.
                   if (!rotate && s.has_nonfinite)
                     return nonfinite_gradient_error(c.args<zero::Replay>().step);
                 }
                 return ok_status();
               },
               {reduce});
  pb.task_runs_when(pb.checks[size_t(gb)], RunsWhen::kLastMicro);
  pb.work(pb.checks[size_t(gb)], sched::Work::kHostBytes,
          double(c16 * (gs >= 0 ? pb.acc_es : es) * size_t(stage == 0 ? rt_->ranks : 1)));
  plan.reads(pb.checks[size_t(gb)], src);
  // Not rotated: the block's update right after its own check (the next step's forward comes
  // after this replay anyway).
  if (!rotate_) add_update(pb, pb.part_of[size_t(gb)], {pb.checks[size_t(gb)]});
}

// The statistics of every shard on every rank (stages 1-3), then the norm in a fixed order.
void ZeroStep::emit_norm(PlanBuild& pb) {
  sched::Plan& plan = pb.plan;
  std::vector<TaskId> norm_deps = pb.checks;
  if (pb.stage >= 1 && pb.ranks > 1) {
    // Raw bits: doubles moved as 16-bit words (a gather moves, it does not convert).
    comm::CollectiveCall gather;
    gather.kind = comm::CollectiveKind::kAllGather;
    gather.count = pb.nb * 2 * sizeof(double) / 2;
    gather.dtype = DType::kBF16;
    const TaskId exchange = plan.add(
        "exchange statistics", Lane::kComm,
        [rt = rt_.get(), gather](const TaskContext& c) -> Status {
          if (c.args<zero::Replay>().flushing || !c.args<zero::Replay>().last_micro())
            return ok_status();
          comm::CollectiveCall call = gather;
          call.send = rt->stats.at(rt->rank, 0);
          call.recv = rt->stats.slots.data();
          rt->count(call, &ZeroTraffic::stats);
          return rt->comm.start(call).wait();
        },
        pb.checks);
    pb.task_runs_when(exchange, RunsWhen::kLastMicro);
    pb.work(exchange, sched::Work::kNetCalls, 1.0);
    pb.work(exchange, sched::Work::kNetBytes,
            double(comm::textbook_bytes(gather, rt_->rank, rt_->ranks).sent));
    norm_deps = {exchange};
  }
  const TaskId first = pb.next_task();
  plan.add(
      "norm", Lane::kCpu,
      [rt = rt_.get(), nbk = pb.nb](const TaskContext& c) {
        if (c.args<zero::Replay>().flushing || !c.args<zero::Replay>().last_micro())
          return ok_status();
        double sum = 0.0;
        bool finite = true;
        for (size_t b = 0; b < nbk; ++b) {
          for (int r = 0; r < rt->ranks; ++r) {
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
  pb.runs_when(first, RunsWhen::kLastMicro);
}

}  // namespace strata::engine
