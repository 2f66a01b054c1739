#include "engine/planned_step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "gpu/kernels.h"

namespace strata::engine {

namespace {
uint64_t round_page(uint64_t n) { return (n + 4095) / 4096 * 4096; }
}  // namespace

Result<std::unique_ptr<PlannedStep>> PlannedStep::create(model::GptModel& model,
                                                         OffloadedOptimizer& optimizer,
                                                         const PlannedStepOptions& options) {
  if (options.staging_slots < 1 || options.staging_slots > 64) {
    return make_error(ErrorCode::kConfig, "planned step: staging slots ", options.staging_slots,
                      " is not accepted (1..64)");
  }
  std::unique_ptr<PlannedStep> s(new PlannedStep(model, optimizer, options));
  s->blocks_ = partition_blocks(model);
  if (optimizer.num_partitions() != s->blocks_.size()) {
    return make_error(ErrorCode::kConfig, "planned step: the optimizer has ",
                      optimizer.num_partitions(), " partitions for ", s->blocks_.size(),
                      " model blocks");
  }
  const auto rows = static_cast<size_t>(model.shape().batch * model.shape().seq);
  s->tokens_.assign(rows, 0);
  s->targets_.assign(rows, 0);
  s->stats_.assign(s->blocks_.size(), cpu::GradStats{});
  STRATA_ASSIGN_OR_RETURN(s->scaling_, StepScaling::create(options.step, model.config().dtype));
  // Clipping needs the norm, fp16 the overflow check, of every gradient before any update; the
  // device optimizer, which cannot wait for a host check within the step, too.
  s->rotate_ = options.step.grad_clip > 0.0f || s->scaling_.fp16() || options.device_optimizer;
  if (options.device_optimizer) {
    STRATA_ASSIGN_OR_RETURN(s->device_opt_,
                            DeviceOptimizer::create(optimizer, model.device(), model.stream()));
  }
  STRATA_ASSIGN_OR_RETURN(sched::Plan plan, s->build_plan());
  STRATA_ASSIGN_OR_RETURN(
      s->executor_, sched::Executor::create(model.device(), std::move(plan), options.executor));
  // The staging buffers live in the executor's pinned arena: register it with the swap store
  // as io_uring fixed buffers (this replaces the store's earlier registration).
  if (optimizer.store() != nullptr && optimizer.nvme_state_bytes() > 0 &&
      s->executor_->pinned_arena_bytes() > 0) {
    STRATA_RETURN_IF_ERROR(optimizer.store()->register_buffers(
        {nvme::BufferRegion{s->executor_->pinned_arena(), s->executor_->pinned_arena_bytes()}}));
  }
  return s;
}

Result<sched::Plan> PlannedStep::build_plan() {
  using sched::BufferId;
  using sched::Lane;
  using sched::TaskContext;
  using sched::TaskId;
  using sched::Tier;
  model::GptModel& m = model_;
  const int64_t layers = m.config().layers;
  const DType dt = m.config().dtype;
  const size_t es = dtype_size(dt);
  const size_t nb = blocks_.size();
  auto name = [&](int64_t b) {
    return b == layers ? std::string("shared") : "layer " + std::to_string(b);
  };
  auto bytes_of = [&](int64_t b) { return static_cast<size_t>(m.block_numel(b)) * es; };
  sched::Plan plan;
  // With clipping (or fp16), the update of step n waits for step n's norm (or overflow check),
  // that is for the whole backward: the plan then rotates, and runs that update at the start of
  // the next run(), overlapping the forward of step n+1 (whose layer l waits for block l's new
  // parameters).
  const bool rotate = rotate_;
  const bool fp16 = scaling_.fp16();
  // The order the optimizer visits the partitions: backward order without rotation (gradients
  // arrive that way), forward order with it (the next forward needs them that way).
  std::vector<size_t> visit(nb);
  for (size_t k = 0; k < nb; ++k) visit[k] = rotate ? nb - 1 - k : k;

  // Pinned host buffers: each block's gradient (down) and new parameters (up; not with the
  // device optimizer, which writes them on the device), whole step.
  const bool device = device_opt_.has_value();
  std::vector<BufferId> grad16(nb), up(nb, -1);
  uint64_t pinned = 0;
  for (size_t b = 0; b < nb; ++b) {
    // Rotated, the update at the start reads the previous step's gradients.
    grad16[b] = plan.add_buffer("grad " + name(int64_t(b)), Tier::kPinnedHost, bytes_of(int64_t(b)),
                                /*initially_valid=*/rotate);
    pinned += round_page(bytes_of(int64_t(b)));
    if (device) continue;
    up[b] = plan.add_buffer("params " + name(int64_t(b)), Tier::kPinnedHost, bytes_of(int64_t(b)));
    pinned += round_page(bytes_of(int64_t(b)));
  }

  // NVMe partitions' reads first: they may start with the step, in partition order.
  std::vector<BufferId> staging(nb, -1);
  std::vector<TaskId> read(nb, -1);
  uint64_t slot_bytes = 0;
  for (size_t p : visit) {
    if (!opt_.on_nvme(p)) continue;
    const std::string n = name(blocks_[p]);
    staging[p] = plan.add_buffer("state " + n, Tier::kPinnedHost, opt_.state_bytes(p));
    const BufferId buf = staging[p];
    read[p] = plan.add("read state " + n, Lane::kNvme, [this, p, buf](const TaskContext& c) {
      if (update_step_ == 0) return ok_status();  // nothing to update in this run
      return opt_.read_partition(p, c.buffer(buf)).wait();
    });
    plan.acquire(read[p], buf);
    plan.writes(read[p], buf);
    slot_bytes = std::max(slot_bytes, round_page(opt_.state_bytes(p)));
  }

  // --offload-optimizer none: Adam on the device (Kernels::adam_step) on the compute lane,
  // reading the block's gradient and writing its parameters where they are.
  std::vector<size_t> part_of(nb);
  for (size_t p = 0; p < nb; ++p) part_of[size_t(blocks_[p])] = p;
  auto device_adam = [&](size_t p) {
    const int64_t b = blocks_[p];
    plan.add("adam " + name(b) + " (device)", Lane::kCompute,
             [this, &m, p, b, dt](const TaskContext& c) -> Status {
               if (update_step_ == 0) return ok_status();  // rotated, and nothing to apply
               return device_opt_->update(*c.stream, opt_, p, m.grad_block(b), m.param_block(b), dt,
                                          cpu::AdamStep{update_step_, update_grad_scale_});
             });
  };
  // Rotated, the previous step's update comes first: before the gradients are zeroed and the
  // forward reads the parameters (the compute lane runs in order).
  if (device && rotate) {
    for (size_t p : visit) device_adam(p);
  }

  // Compute: the model's entry points, one task per layer.
  auto compute = [&](std::string task_name, auto fn) {
    return plan.add(std::move(task_name), Lane::kCompute, [this, fn](const TaskContext& c) {
      return flushing_ ? ok_status() : fn(*c.stream);
    });
  };
  compute("zero grads", [&m](gpu::Stream& s) -> Status {
    for (int64_t b = 0; b < m.num_blocks(); ++b) {
      STRATA_RETURN_IF_ERROR(
          s.memset(m.grad_block(b), 0,
                   static_cast<size_t>(m.block_numel(b)) * dtype_size(m.config().dtype)));
    }
    return ok_status();
  });
  compute("set batch",
          [this](gpu::Stream& s) { return model_.set_batch(s, tokens_.data(), targets_.data()); });
  std::vector<TaskId> forward(nb, -1);  // by block: the first task that reads its parameters
  forward[size_t(layers)] = compute("embedding forward", [&m, layers](gpu::Stream& s) {
    return m.embedding_forward(s, m.param_block(layers));
  });
  for (int64_t l = 0; l < layers; ++l) {
    forward[size_t(l)] = compute("forward " + std::to_string(l), [&m, l](gpu::Stream& s) {
      return m.layer_forward(s, l, m.param_block(l));
    });
  }
  compute("head forward",
          [&m, layers](gpu::Stream& s) { return m.head_forward(s, m.param_block(layers)); });
  compute("head backward", [&m, layers](gpu::Stream& s) {
    return m.head_backward(s, m.param_block(layers), m.grad_block(layers));
  });
  std::vector<TaskId> down(nb, -1);
  auto add_down = [&](int64_t b, TaskId after) {
    const BufferId buf = grad16[size_t(b)];
    const size_t bytes = bytes_of(b);
    down[size_t(b)] = plan.add("grads down " + name(b), Lane::kD2H,
                               [this, &m, b, buf, bytes](const TaskContext& c) {
                                 if (flushing_) return ok_status();
                                 return c.stream->copy(c.buffer(buf), m.grad_block(b), bytes,
                                                       gpu::CopyKind::kDeviceToHost);
                               },
                               {after});
    plan.writes(down[size_t(b)], buf);
  };
  const int64_t last_seg = m.num_segments() - 1;
  for (int64_t seg = last_seg; seg >= 0; --seg) {
    if (seg != last_seg) {
      for (int64_t l = m.segment_begin(seg); l < m.segment_end(seg); ++l) {
        compute("recompute " + std::to_string(l),
                [&m, l](gpu::Stream& s) { return m.layer_recompute(s, l, m.param_block(l)); });
      }
    }
    for (int64_t l = m.segment_end(seg) - 1; l >= m.segment_begin(seg); --l) {
      add_down(l, compute("backward " + std::to_string(l), [&m, l](gpu::Stream& s) {
                 return m.layer_backward(s, l, m.param_block(l), m.grad_block(l));
               }));
      if (device && !rotate) device_adam(part_of[size_t(l)]);  // as soon as its gradient is
    }
  }
  add_down(layers, compute("embedding backward", [&m, layers](gpu::Stream& s) {
             return m.embedding_backward(s, m.grad_block(layers));
           }));
  if (device && !rotate) device_adam(part_of[size_t(layers)]);

  // cpu: per-block gradient checks, then the norm (block order, as the serial step).
  std::vector<TaskId> checks(nb, -1);  // by partition
  for (size_t p = 0; p < nb; ++p) {
    const int64_t b = blocks_[p];
    const BufferId buf = grad16[size_t(b)];
    const int64_t numel = m.block_numel(b);
    const TaskId t = plan.add("check " + name(b), Lane::kCpu,
                              [this, b, buf, numel, dt, fp16](const TaskContext& c) {
                                if (flushing_) return ok_status();
                                stats_[size_t(b)] = cpu::grad_check(c.buffer(buf), dt, numel);
                                // fp16: an overflow skips the step (decided after it); otherwise it
                                // is an error.
                                return stats_[size_t(b)].has_nonfinite && !fp16
                                           ? nonfinite_gradient_error(step_)
                                           : ok_status();
                              },
                              {down[size_t(b)]});
    plan.reads(t, buf);
    checks[p] = t;
  }
  plan.add(
      "norm", Lane::kCpu,
      [this](const TaskContext&) {
        if (flushing_) return ok_status();
        double sum = 0.0;
        bool finite = true;
        for (const cpu::GradStats& s : stats_) {
          sum += s.sum_squares;
          finite = finite && !s.has_nonfinite;
        }
        sum_ = sum;  // run() decides from these (StepScaling), as the serial step does
        finite_ = finite;
        return ok_status();
      },
      checks);
  // cpu: Adam per partition; h2d: the new parameters up; nvme: the state written behind.
  for (size_t p : visit) {
    if (device) break;
    const int64_t b = blocks_[p];
    const BufferId g = grad16[size_t(b)], u = up[size_t(b)], st = staging[p];
    const int64_t numel = m.block_numel(b);
    // The block's own check first, so a non-finite gradient never reaches its optimizer state
    // (rotated, the previous run's checks and norm passed before this run could start).
    std::vector<TaskId> deps;
    if (!rotate) deps.push_back(checks[p]);
    if (read[p] >= 0) deps.push_back(read[p]);
    const TaskId adam = plan.add(
        "adam " + name(b), Lane::kCpu,
        [this, p, g, u, st, numel, dt](const TaskContext& c) -> Status {
          if (update_step_ == 0) return ok_status();  // rotated, and nothing to apply
          void* state = st >= 0 ? c.buffer(st) : nullptr;
          PartitionGrad pg;
          pg.grads = c.buffer(g);
          pg.grad_dtype = dt;
          pg.out16 = dt == DType::kF32 ? nullptr : c.buffer(u);
          pg.out_dtype = dt;
          STRATA_RETURN_IF_ERROR(
              opt_.step_partition(p, state, pg, cpu::AdamStep{update_step_, update_grad_scale_}));
          if (dt == DType::kF32) {
            std::memcpy(c.buffer(u), opt_.master_params(p, state), static_cast<size_t>(numel) * 4);
          }
          return ok_status();
        },
        deps);
    plan.reads(adam, g);
    plan.writes(adam, u);
    const size_t bytes = bytes_of(b);
    const TaskId upload = plan.add("params up " + name(b), Lane::kH2D,
                                   [this, &m, b, u, bytes](const TaskContext& c) {
                                     if (update_step_ == 0) return ok_status();
                                     return c.stream->copy(m.param_block(b), c.buffer(u), bytes,
                                                           gpu::CopyKind::kHostToDevice);
                                   },
                                   {adam});
    plan.reads(upload, u);
    if (rotate) plan.depend(forward[size_t(b)], upload);
    if (st >= 0) {
      plan.reads(adam, st);
      plan.writes(adam, st);
      const TaskId write = plan.add("write state " + name(b), Lane::kNvme,
                                    [this, p, st](const TaskContext& c) {
                                      if (update_step_ == 0) return ok_status();
                                      return opt_.write_partition(p, c.buffer(st)).wait();
                                    },
                                    {adam});
      plan.reads(write, st);
      plan.release(write, st);
    }
  }
  sched::Budgets budgets;
  budgets.bytes[static_cast<int>(Tier::kPinnedHost)] =
      pinned + static_cast<uint64_t>(options_.staging_slots) * slot_bytes;
  STRATA_RETURN_IF_ERROR(plan.finalize(budgets).with_context("planning the offloaded step"));
  return plan;
}

Result<StepResult> PlannedStep::run(const int32_t* tokens, const int32_t* targets, int64_t step) {
  // Checked here: a task's error would leave the executor failed for good.
  if (tokens == nullptr || targets == nullptr) {
    return make_error(ErrorCode::kConfig, "PlannedStep::run needs tokens and targets");
  }
  STRATA_RETURN_IF_ERROR(model_.check_batch(tokens, targets));
  std::copy(tokens, tokens + tokens_.size(), tokens_.begin());
  std::copy(targets, targets + targets_.size(), targets_.begin());
  step_ = step;
  if (rotate_) {  // the previous step's update, if it is to be applied
    update_step_ = pending_adam_step_;
    update_grad_scale_ = pending_grad_scale_;
  } else {  // this step's, with no clipping and no loss scale
    update_step_ = scaling_.applied() + 1;
    update_grad_scale_ = 1.0f;
  }
  flushing_ = false;
  StepResult r;
  r.loss_scale = scaling_.loss_scale();
  model_.set_loss_scale(scaling_.loss_scale());
  STRATA_RETURN_IF_ERROR(executor_->replay());
  STRATA_ASSIGN_OR_RETURN(const StepScaling::Decision d, scaling_.decide(sum_, finite_, step));
  if (rotate_) {
    pending_adam_step_ = d.apply ? d.adam_step : 0;
    pending_grad_scale_ = d.grad_scale;
  }
  r.loss = model_.mean_loss();
  r.grad_norm = d.norm;
  r.skipped = !d.apply;
  return r;
}

Status PlannedStep::flush() {
  if (pending_adam_step_ == 0) return ok_status();
  update_step_ = pending_adam_step_;
  update_grad_scale_ = pending_grad_scale_;
  flushing_ = true;
  const Status st = executor_->replay();
  flushing_ = false;
  STRATA_RETURN_IF_ERROR(st);
  pending_adam_step_ = 0;
  return device_opt_ ? device_opt_->download(opt_, model_.stream()) : ok_status();
}

}  // namespace strata::engine
