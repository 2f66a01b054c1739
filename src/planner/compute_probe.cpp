#include "planner/compute_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "core/median.h"
#include "cpu/pinned_memory.h"
#include "engine/collective_work.h"
#include "scheduler/executor.h"

namespace strata::planner {

namespace {

using sched::Lane;
using sched::TaskId;

constexpr size_t kUploadBytes = 4096;  // each upload: a hand-off, not a transfer
constexpr size_t kElements = 8;        // each collective's 16-bit elements per rank
// Timed rounds (a replay of each of the four plans): at least 2, then more while a second has
// not passed, at most 15 (a model whose replays take seconds probes with 10 of them in all).
constexpr int kMinRounds = 2, kMaxRounds = 15;
constexpr std::chrono::milliseconds kRoundsFor{1000};

// What the plan's small tasks touch.
struct Scratch {
  comm::Communicator* world = nullptr;  // null: one rank, the collectives are empty tasks
  gpu::DeviceBuffer device;
  cpu::PinnedBuffer host;
  std::vector<uint16_t> gathered, reduced;
  std::vector<int32_t> tokens, targets;
};

// A collective of the probe's (its buffers apart).
comm::CollectiveCall probe_call(comm::CollectiveKind kind) {
  comm::CollectiveCall call;
  call.kind = kind;
  call.dtype = DType::kBF16;
  call.count = kElements;
  return call;
}

sched::TaskFn collective(Scratch& s, comm::CollectiveKind kind) {
  return [&s, kind](const sched::TaskContext&) -> Status {
    if (s.world == nullptr) return ok_status();
    comm::CollectiveCall call = probe_call(kind);
    if (kind == comm::CollectiveKind::kAllGather) {
      call.send = s.gathered.data() + static_cast<size_t>(s.world->rank()) * kElements;
      call.recv = s.gathered.data();
    } else {
      call.send = s.reduced.data();
      call.recv = s.reduced.data();
    }
    return s.world->start(call).wait();
  };
}

struct Op {
  std::string name;
  bool backward = false;
  sched::TaskFn run;
};

// The step's compute ops for `g`, in order.
std::vector<Op> step_ops(model::Model& g, Scratch& s) {
  const int64_t L = g.num_layers();
  std::vector<Op> ops;
  auto op = [&ops](std::string name, bool backward, std::function<Status(gpu::Stream&)> fn) {
    ops.push_back({std::move(name), backward,
                   [fn = std::move(fn)](const sched::TaskContext& c) { return fn(*c.stream); }});
  };
  op("embedding forward", false, [&g, &s, L](gpu::Stream& st) -> Status {
    STRATA_RETURN_IF_ERROR(g.set_batch(st, s.tokens.data(), s.targets.data()));
    return g.embedding_forward(st, g.param_block(L));
  });
  for (int64_t l = 0; l < L; ++l) {
    op("forward " + std::to_string(l), false,
       [&g, l](gpu::Stream& st) { return g.layer_forward(st, l, g.param_block(l)); });
  }
  op("head", true, [&g, L](gpu::Stream& st) -> Status {
    STRATA_RETURN_IF_ERROR(g.head_forward(st, g.param_block(L)));
    return g.head_backward(st, g.param_block(L), g.grad_block(L));
  });
  for (int64_t l = L - 1; l >= 0; --l) {
    op("backward " + std::to_string(l), true, [&g, l](gpu::Stream& st) {
      return g.layer_backward(st, l, g.param_block(l), g.grad_block(l));
    });
  }
  op("embedding backward", true,
     [&g, L](gpu::Stream& st) { return g.embedding_backward(st, g.grad_block(L)); });
  return ops;
}

// The ops of a model of `layers` layers with no work to do (the plans the cost model simulates).
std::vector<Op> shape_ops(int64_t layers) {
  const sched::TaskFn none = [](const sched::TaskContext&) { return ok_status(); };
  std::vector<Op> ops(static_cast<size_t>(2 * layers + 3), Op{"op", false, none});
  for (size_t i = static_cast<size_t>(layers) + 1; i < ops.size(); ++i) ops[i].backward = true;
  return ops;
}

// What the step-shaped plan's other tasks do (null: back to back, the ops alone).
struct Transfers {
  std::function<sched::TaskFn(comm::CollectiveKind)> collective;
  sched::TaskFn upload;
};

Transfers real_transfers(Scratch& s) {
  return {[&s](comm::CollectiveKind kind) { return collective(s, kind); },
          [&s](const sched::TaskContext& c) {
            return c.stream->copy(s.device.data(), s.host.data(), kUploadBytes,
                                  gpu::CopyKind::kHostToDevice);
          }};
}

// The ops one after the other on the compute lane; with `x`, shaped as a step: op i's gather may
// start once op i-2 is done (two gathered buffers: one op ahead), its upload follows it, and the
// op its upload; each backward op's reduction follows the op. With `op_flops` (the cost model's
// plans; 0: none) each op declares that work, and the other tasks what they move (a collective's
// call and bytes among `ranks`, as the step's plans declare theirs).
Result<sched::Plan> probe_plan(const std::vector<Op>& ops, const Transfers* x,
                               double op_flops = 0.0, int ranks = 1) {
  using comm::CollectiveKind;
  const size_t n = ops.size();
  sched::Plan plan;
  std::vector<TaskId> upload(n, -1), op(n, -1);
  auto fetch = [&](size_t i) {
    if (x == nullptr || i >= n) return;
    std::vector<TaskId> deps;
    if (i >= 2) deps.push_back(op[i - 2]);
    const TaskId gather =
        plan.add("gather", Lane::kComm, x->collective(CollectiveKind::kAllGather), deps);
    upload[i] = plan.add("upload", Lane::kH2D, x->upload, {gather});
    if (op_flops > 0.0) {
      engine::add_collective_work(plan, gather, probe_call(CollectiveKind::kAllGather), 0, ranks);
      plan.add_work(upload[i], sched::Work::kH2DBytes, double(kUploadBytes));
    }
  };
  fetch(0);
  fetch(1);
  for (size_t i = 0; i < n; ++i) {
    std::vector<TaskId> deps;
    if (upload[i] >= 0) deps.push_back(upload[i]);
    op[i] = plan.add(ops[i].name, Lane::kCompute, ops[i].run, deps);
    if (op_flops > 0.0) plan.add_work(op[i], sched::Work::kFlops, op_flops);
    fetch(i + 2);
    if (x != nullptr && ops[i].backward) {
      const TaskId reduce =
          plan.add("reduce", Lane::kComm, x->collective(CollectiveKind::kAllReduce), {op[i]});
      if (op_flops > 0.0) {
        engine::add_collective_work(plan, reduce, probe_call(CollectiveKind::kAllReduce), 0, ranks);
      }
    }
  }
  STRATA_RETURN_IF_ERROR(plan.finalize());
  return plan;
}

}  // namespace

Result<ComputeProbe> measure_compute(const CalibrationRequest& rq) {
  model::RunShape shape = rq.shape;
  shape.checkpoint_interval = 0;  // keep every activation: a recompute is a forward, counted so
  Scratch s;
  s.world = rq.comm != nullptr && rq.comm->size() > 1 ? rq.comm : nullptr;
  const size_t ranks = s.world != nullptr ? static_cast<size_t>(s.world->size()) : 1;
  STRATA_ASSIGN_OR_RETURN(s.device, rq.device->allocate(kUploadBytes));
  STRATA_ASSIGN_OR_RETURN(s.host, cpu::default_pinned_pool().allocate(kUploadBytes));
  std::memset(s.host.data(), 0, kUploadBytes);
  s.gathered.assign(kElements * ranks, 0);
  s.reduced.assign(kElements, 0);
  // Copies of one and of two layers, each replayed back to back and shaped as a step.
  // (The executors' tasks call into the models: the executors are destroyed first.)
  std::unique_ptr<model::Model> m[2];
  std::unique_ptr<sched::Executor> ex[2][2];  // [copy][shaped]
  for (int k = 0; k < 2; ++k) {
    STRATA_ASSIGN_OR_RETURN(m[k], rq.probe.make(*rq.device, k + 1, shape));
  }
  const auto rows = static_cast<size_t>(shape.batch * shape.seq);
  const auto vocab = static_cast<size_t>(m[0]->vocab());
  s.tokens.resize(rows);
  s.targets.resize(rows);
  for (size_t i = 0; i < rows; ++i) {
    s.tokens[i] = static_cast<int32_t>(i % vocab);
    s.targets[i] = static_cast<int32_t>((i + 1) % vocab);
  }
  sched::ExecutorOptions eo;
  eo.cpu_threads = std::max(1, rq.host_threads);
  eo.cpu_workers = std::min(2, eo.cpu_threads);
  eo.trace = false;
  const Transfers x = real_transfers(s);
  size_t ops[2] = {};
  for (int k = 0; k < 2; ++k) {
    const std::vector<Op> o = step_ops(*m[k], s);
    ops[k] = o.size();
    for (int shaped = 0; shaped < 2; ++shaped) {
      STRATA_ASSIGN_OR_RETURN(sched::Plan plan, probe_plan(o, shaped != 0 ? &x : nullptr));
      STRATA_ASSIGN_OR_RETURN(ex[k][shaped],
                              sched::Executor::create(*rq.device, std::move(plan), eo));
    }
  }
  // Warm-up: a quarter of a second of replays (caches, the cores' clock, the BLAS's buffers):
  // without it the first rates came out 40% low. With several ranks, rank 0's clock decides
  // when it ends (every rank must replay the plans' collectives alike).
  const auto warm = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    float more = i < 2 || std::chrono::steady_clock::now() - warm < std::chrono::milliseconds(250)
                     ? 1.0f
                     : 0.0f;
    if (s.world != nullptr) {
      STRATA_RETURN_IF_ERROR(s.world->broadcast(&more, 1, DType::kF32, 0));
    }
    if (more == 0.0f) break;
    STRATA_RETURN_IF_ERROR(ex[i % 2][(i / 2) % 2]->replay());
  }
  // The four alternate, in the reverse order every other round, so that a drift of the
  // machine's speed touches them alike. With several ranks the slowest rank's median of each
  // counts (as every rank takes the slowest rank's rates, calibration.h); the replays are not
  // held together by barriers: as in a step, a rank that finished its replay early waits for
  // the others at the first collective of its next step-shaped one (barriers before each
  // replay made the hand-off per op about a tenth of it on the test machine's two vCPUs, and
  // its 2-rank micro-batch-major steps were predicted 16% short in the median of eight runs,
  // which ranged from -51% to +16%).
  std::vector<double> t[2][2];  // [copy][shaped]
  const auto timed = std::chrono::steady_clock::now();
  for (int i = 0; i < kMaxRounds; ++i) {
    if (i >= kMinRounds) {  // enough: rank 0's clock decides, as for the warm-up
      float more = std::chrono::steady_clock::now() - timed < kRoundsFor ? 1.0f : 0.0f;
      if (s.world != nullptr) {
        STRATA_RETURN_IF_ERROR(s.world->broadcast(&more, 1, DType::kF32, 0));
      }
      if (more == 0.0f) break;
    }
    for (int j = 0; j < 4; ++j) {
      const int q = i % 2 == 0 ? j : 3 - j;
      const int k = q / 2, shaped = q % 2;
      const auto t0 = std::chrono::steady_clock::now();
      STRATA_RETURN_IF_ERROR(ex[k][shaped]->replay());
      t[k][shaped].push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  float med[2][2];
  for (int k = 0; k < 2; ++k) {
    for (int shaped = 0; shaped < 2; ++shaped) {
      med[k][shaped] = static_cast<float>(median(t[k][shaped]));
    }
  }
  if (s.world != nullptr) {
    STRATA_RETURN_IF_ERROR(
        s.world->all_reduce(&med[0][0], &med[0][0], 4, DType::kF32, comm::ReduceOp::kMax));
  }
  const double back[2] = {med[0][0], med[1][0]}, step[2] = {med[0][1], med[1][1]};
  const double layer_s = std::max(back[1] - back[0], 1e-9);
  const double head_s = std::max(back[0] - layer_s, 1e-9);
  const auto n = static_cast<double>(ops[0] + ops[1]);
  const model::BlockCost lc = m[0]->block_cost(0), hc = m[0]->block_cost(1);
  ComputeProbe out;
  out.layer_flops_per_s = (lc.forward_flops + lc.backward_flops) / layer_s;
  out.head_flops_per_s = (hc.forward_flops + hc.backward_flops) / head_s;
  out.step_extra_s = (step[0] + step[1] - back[0] - back[1]) / n;
  out.op_s = (back[0] + back[1]) / n;
  return out;
}

Result<double> fit_handoff(const ComputeProbe& probe, const sched::Rates& rates, int ranks) {
  sched::Rates r = rates;
  r.handoff_s = 0.0;
  const double flops = probe.op_s * r.rate(sched::Work::kFlops);
  const sched::TaskFn none = [](const sched::TaskContext&) { return ok_status(); };
  const Transfers x{[none](comm::CollectiveKind) { return none; }, none};
  double modelled = 0.0;
  size_t n = 0;
  for (int64_t layers : {1, 2}) {
    const std::vector<Op> ops = shape_ops(layers);
    n += ops.size();
    for (const Transfers* shaped : {static_cast<const Transfers*>(nullptr), &x}) {
      STRATA_ASSIGN_OR_RETURN(const sched::Plan plan, probe_plan(ops, shaped, flops, ranks));
      STRATA_ASSIGN_OR_RETURN(const sched::Prediction p, sched::simulate(plan, r));
      modelled += shaped != nullptr ? p.step_s : -p.step_s;
    }
  }
  return std::max(0.0, probe.step_extra_s - modelled / static_cast<double>(n));
}

}  // namespace strata::planner
