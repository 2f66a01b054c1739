#include "engine/compute_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "cpu/pinned_memory.h"
#include "scheduler/executor.h"

namespace strata::engine {

namespace {

using sched::Lane;
using sched::TaskId;

constexpr size_t kUploadBytes = 4096;  // each upload: a hand-off, not a transfer
constexpr size_t kElements = 8;        // each collective's 16-bit elements per rank

// One copy of the model and its step-shaped plan (the executor's tasks call into the model, so
// the model is destroyed after it).
struct Copy {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<sched::Executor> executor;
};

// What the plan's small tasks touch.
struct Scratch {
  comm::Communicator* world = nullptr;  // null: one rank, the collectives are empty tasks
  gpu::DeviceBuffer device;
  cpu::PinnedBuffer host;
  std::vector<uint16_t> gathered, reduced;
  std::vector<int32_t> tokens, targets;
};

sched::TaskFn collective(Scratch& s, comm::CollectiveKind kind) {
  return [&s, kind](const sched::TaskContext&) -> Status {
    if (s.world == nullptr) return ok_status();
    comm::CollectiveCall call;
    call.kind = kind;
    call.dtype = DType::kBF16;
    call.count = kElements;
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
  std::function<Status(gpu::Stream&)> run;
};

// The step's compute ops for `g`, in order.
std::vector<Op> step_ops(model::Model& g, Scratch& s) {
  const int64_t L = g.num_layers();
  std::vector<Op> ops;
  ops.push_back({"embedding forward", false, [&g, &s, L](gpu::Stream& st) -> Status {
                   STRATA_RETURN_IF_ERROR(g.set_batch(st, s.tokens.data(), s.targets.data()));
                   return g.embedding_forward(st, g.param_block(L));
                 }});
  for (int64_t l = 0; l < L; ++l) {
    ops.push_back({"forward " + std::to_string(l), false,
                   [&g, l](gpu::Stream& st) { return g.layer_forward(st, l, g.param_block(l)); }});
  }
  ops.push_back({"head", true, [&g, L](gpu::Stream& st) -> Status {
                   STRATA_RETURN_IF_ERROR(g.head_forward(st, g.param_block(L)));
                   return g.head_backward(st, g.param_block(L), g.grad_block(L));
                 }});
  for (int64_t l = L - 1; l >= 0; --l) {
    ops.push_back({"backward " + std::to_string(l), true, [&g, l](gpu::Stream& st) {
                     return g.layer_backward(st, l, g.param_block(l), g.grad_block(l));
                   }});
  }
  ops.push_back({"embedding backward", true,
                 [&g, L](gpu::Stream& st) { return g.embedding_backward(st, g.grad_block(L)); }});
  return ops;
}

// Op i's gather may start once op i-2 is done (two gathered buffers: one op ahead); its upload
// follows it, and the op its upload. Each backward op's reduction follows the op.
Result<sched::Plan> step_plan(model::Model& g, Scratch& s) {
  const std::vector<Op> ops = step_ops(g, s);
  const size_t n = ops.size();
  sched::Plan plan;
  std::vector<TaskId> upload(n, -1), op(n, -1);
  auto fetch = [&](size_t i) {
    std::vector<TaskId> deps;
    if (i >= 2) deps.push_back(op[i - 2]);
    const TaskId gather =
        plan.add("gather", Lane::kComm, collective(s, comm::CollectiveKind::kAllGather), deps);
    upload[i] = plan.add("upload", Lane::kH2D,
                         [&s](const sched::TaskContext& c) {
                           return c.stream->copy(s.device.data(), s.host.data(), kUploadBytes,
                                                 gpu::CopyKind::kHostToDevice);
                         },
                         {gather});
  };
  for (size_t i = 0; i < std::min<size_t>(2, n); ++i) fetch(i);
  for (size_t i = 0; i < n; ++i) {
    auto run = ops[i].run;
    op[i] = plan.add(ops[i].name, Lane::kCompute,
                     [run](const sched::TaskContext& c) { return run(*c.stream); }, {upload[i]});
    if (i + 2 < n) fetch(i + 2);
    if (ops[i].backward) {
      plan.add("reduce", Lane::kComm, collective(s, comm::CollectiveKind::kAllReduce), {op[i]});
    }
  }
  STRATA_RETURN_IF_ERROR(plan.finalize());
  return plan;
}

}  // namespace

Result<std::vector<double>> measure_compute(const CalibrationRequest& rq) {
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
  Copy m[2];
  for (int k = 0; k < 2; ++k) {
    STRATA_ASSIGN_OR_RETURN(m[k].model, rq.probe.make(*rq.device, k + 1, shape));
  }
  const auto rows = static_cast<size_t>(shape.batch * shape.seq);
  const auto vocab = static_cast<size_t>(m[0].model->vocab());
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
  for (Copy& c : m) {
    STRATA_ASSIGN_OR_RETURN(sched::Plan plan, step_plan(*c.model, s));
    STRATA_ASSIGN_OR_RETURN(c.executor, sched::Executor::create(*rq.device, std::move(plan), eo));
  }
  // Warm-up: a quarter of a second of steps (caches, the cores' clock, the BLAS's buffers):
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
    STRATA_RETURN_IF_ERROR(m[i % 2].executor->replay());
  }
  // Alternating, so that a drift of the machine's speed touches both alike.
  std::vector<double> t[2];
  for (int i = 0; i < 7; ++i) {
    for (int k = 0; k < 2; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      STRATA_RETURN_IF_ERROR(m[k].executor->replay());
      t[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  for (auto& v : t) std::sort(v.begin(), v.end());
  const double layer_s = std::max(t[1][3] - t[0][3], 1e-9);
  const double head_s = std::max(t[0][3] - layer_s, 1e-9);
  const model::BlockCost lc = m[0].model->block_cost(0), hc = m[0].model->block_cost(1);
  return std::vector<double>{(lc.forward_flops + lc.backward_flops) / layer_s,
                             (hc.forward_flops + hc.backward_flops) / head_s};
}

}  // namespace strata::engine
