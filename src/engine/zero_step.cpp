#include "engine/zero_step.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "engine/memory_budget.h"

namespace strata::engine {

Result<std::unique_ptr<ZeroStep>> ZeroStep::create(model::Model& model,
                                                   OffloadedOptimizer& optimizer,
                                                   comm::Communicator& comm,
                                                   const ZeroStepOptions& options) {
  // The settings' ranges and combinations are EngineConfig::validate()'s (engine::Session, the
  // only caller, validates before it creates the step); what is left here is the step's own.
  if (options.staging_slots < 1 || options.staging_slots > 64) {
    return make_error(ErrorCode::kConfig, "ZeRO step: staging slots ", options.staging_slots,
                      " is not accepted (1..64)");
  }
  if (comm.device_buffers()) {
    return make_error(ErrorCode::kUnsupported, "ZeRO step: the ", comm.backend(),
                      " communicator needs device buffers; the step's host communicator must "
                      "take host buffers (MPI), and a device one comes beside it");
  }
  comm::Communicator* dcomm = nullptr;
  if (options.zero.collectives == Collectives::kDevice) {
    dcomm = options.device_comm;
    // The CpuDevice's device memory is host memory; a plan that runs nothing (plan_only) only
    // needs the ranks.
    if (dcomm == nullptr &&
        (model.device().kind() == gpu::DeviceKind::kCpu || optimizer.options().plan_only)) {
      dcomm = &comm;
    }
    if (dcomm == nullptr) {
      return make_error(ErrorCode::kConfig, ref(Field::kCollectives),
                        " device needs a communicator of device buffers (NCCL) on the ",
                        model.device().name(), "; use host");
    }
    if (dcomm->size() != comm.size() || dcomm->rank() != comm.rank()) {
      return make_error(ErrorCode::kConfig, "ZeRO step: the device communicator is rank ",
                        dcomm->rank(), " of ", dcomm->size(), ", the host one rank ", comm.rank(),
                        " of ", comm.size());
    }
  }
  std::unique_ptr<ZeroStep> s(new ZeroStep(model, optimizer, comm, options));
  s->rt_->dcomm = dcomm;
  zero::Layout& lay = s->layout_;
  lay.on_device = dcomm != nullptr;
  lay.rank = comm.rank();
  lay.ranks = comm.size();
  lay.stage = options.zero.stage;
  lay.layers = model.num_layers();
  lay.dt = model.dtype();
  lay.acc = options.zero.stage >= 2 && options.fp32_grad_accum ? DType::kF32 : model.dtype();
  lay.slots = options.zero.stage >= 2 && !options.schedule.device_grad_sum
                  ? options.schedule.micros_per_replay()
                  : 1;
  lay.delayed = options.optimizer.delayed_update_warmup >= 0;
  STRATA_ASSIGN_OR_RETURN(lay.parts, Partitioning::create(model.block_numels(), lay.ranks,
                                                          options.zero.persistence_threshold));
  lay.blocks = partition_blocks(model);
  lay.part_of.assign(lay.blocks.size(), 0);
  for (size_t p = 0; p < lay.blocks.size(); ++p) lay.part_of[size_t(lay.blocks[p])] = p;
  lay.home = zero::choose_homes(lay, options.zero.param_home(), options.zero.param_gpu_fraction);
  const bool plan_only = optimizer.options().plan_only;  // no store needed: nothing is stored
  for (Home h : lay.home) {
    if (h == Home::kNvme && options.swap_store == nullptr && !plan_only) {
      return make_error(ErrorCode::kConfig, ref(Field::kOffloadParam), " nvme needs a swap store (",
                        ref(Field::kNvmePath), " DIR[,DIR...])");
    }
  }
  const bool offload_acts = options.zero.offload_activations != Home::kDevice;
  for (int64_t seg = 0; seg + 1 < model.num_segments(); ++seg) {
    if (model.caller_checkpoint(seg) != offload_acts) {
      return make_error(ErrorCode::kConfig, "ZeRO step: ", ref(Field::kOffloadActivations), " ",
                        offload_acts ? "needs a model that leaves its checkpoints to the engine"
                                     : "none needs a model that keeps its checkpoints",
                        " (ZeroStep::block_storage)");
    }
  }
  if (options.zero.offload_activations == Home::kNvme && options.swap_store == nullptr &&
      !plan_only) {
    return make_error(ErrorCode::kConfig, ref(Field::kOffloadActivations),
                      " nvme needs a swap store (", ref(Field::kNvmePath), " DIR[,DIR...])");
  }
  for (int64_t b = 0; b < model.num_blocks(); ++b) {
    if (!s->layout_.sharded(b) && model.param_block(b) == nullptr) {
      return make_error(ErrorCode::kConfig, "ZeRO stage ", options.zero.stage, ": block ", b,
                        " must be on the device (ZeroStep::block_storage)");
    }
    if (options.zero.stage <= 1 && model.grad_block(b) == nullptr) {
      return make_error(ErrorCode::kConfig, "ZeRO stage ", options.zero.stage,
                        " keeps whole gradients on the device: block ", b,
                        " has none (ZeroStep::block_storage)");
    }
  }
  const std::vector<int64_t> want = optimizer_numel(s->layout_.parts, options.zero.stage);
  if (optimizer.num_partitions() != want.size()) {
    return make_error(ErrorCode::kConfig, "ZeRO step: the optimizer has ",
                      optimizer.num_partitions(), " partitions for ", want.size(), " model blocks");
  }
  for (size_t p = 0; p < want.size(); ++p) {
    if (optimizer.numel(p) != want[p]) {
      return make_error(ErrorCode::kConfig, "ZeRO stage ", options.zero.stage,
                        ": optimizer partition ", p, " has ", optimizer.numel(p),
                        " elements, expected ", want[p], " (ZeroStep::optimizer_numel)");
    }
  }
  const auto rows = static_cast<size_t>(model.shape().batch * model.shape().seq);
  const int slots = options.schedule.micros_per_replay();
  if (slots > 1) STRATA_RETURN_IF_ERROR(model.set_micro_slots(slots));
  s->rt_->tokens.assign(rows * static_cast<size_t>(slots), 0);
  s->rt_->targets.assign(rows * static_cast<size_t>(slots), 0);
  s->rt_->stats.blocks = s->layout_.blocks.size();
  s->rt_->stats.slots.assign(static_cast<size_t>(s->rt_->ranks) * s->layout_.blocks.size() * 2,
                             0.0);
  STRATA_ASSIGN_OR_RETURN(s->pending_.scaling, StepScaling::create(options.step, model.dtype()));
  // Clipping needs the global norm, fp16 the overflow check, of every gradient before any update;
  // the device optimizer, which cannot wait for a host check within the step, too; the delayed
  // update runs during the next step by definition.
  lay.rotate = options.step.grad_clip > 0.0f || s->pending_.scaling.fp16() ||
               options.optimizer.offload == Home::kDevice || options.optimizer.gpu_fraction > 0.0 ||
               lay.delayed;
  const std::vector<bool> on_device = DeviceOptimizer::choose(
      optimizer, options.optimizer.offload == Home::kDevice ? 1.0 : options.optimizer.gpu_fraction);
  bool any_on_device = false;
  for (bool b : on_device) any_on_device = any_on_device || b;
  if (any_on_device) {
    STRATA_ASSIGN_OR_RETURN(s->rt_->device_opt, DeviceOptimizer::create(optimizer, model.device(),
                                                                        model.stream(), on_device));
    lay.device_update.assign(lay.nb(), false);
    for (size_t b = 0; b < lay.nb(); ++b) lay.device_update[b] = on_device[lay.part_of[b]];
  }
  STRATA_ASSIGN_OR_RETURN(zero::Compiled compiled, zero::compile(s->compile_input()));
  s->buffers_ = std::move(compiled.host);
  s->notes_ = std::move(compiled.built.notes);
  sched::Plan plan = std::move(compiled.built.plan);
  if (plan_only) {
    s->fit_ = s->check_budgets(plan);
    s->plan_ = std::move(plan);
    return s;
  }
  STRATA_RETURN_IF_ERROR(s->check_budgets(plan));
  STRATA_ASSIGN_OR_RETURN(
      s->executor_, sched::Executor::create(model.device(), std::move(plan), options.executor));
  // The NVMe staging lies in the executor's pinned arena: registered with each store in use.
  nvme::SwapStore* opt_store = optimizer.nvme_state_bytes() > 0 ? optimizer.store() : nullptr;
  nvme::SwapStore* swap_store = nullptr;
  for (Home h : s->layout_.home) swap_store = h == Home::kNvme ? options.swap_store : swap_store;
  if (options.zero.offload_activations == Home::kNvme) swap_store = options.swap_store;
  if (swap_store == opt_store) swap_store = nullptr;  // one registration per store
  for (nvme::SwapStore* store : {opt_store, swap_store}) {
    if (store == nullptr || s->executor_->pinned_arena_bytes() == 0) continue;
    STRATA_RETURN_IF_ERROR(store->register_buffers(
        {nvme::BufferRegion{s->executor_->pinned_arena(), s->executor_->pinned_arena_bytes()}}));
  }
  STRATA_RETURN_IF_ERROR(s->init_param_shards());
  return s;
}

zero::CompileInput ZeroStep::compile_input() const {
  const model::Model& m = rt_->model;
  zero::CompileInput in;
  in.layout = &layout_;
  in.rt = rt_.get();
  in.ops.layers = layout_.layers;
  for (int64_t seg = 0; seg < m.num_segments(); ++seg) {
    in.ops.segments.emplace_back(m.segment_begin(seg), m.segment_end(seg));
  }
  for (size_t b = 0; b < layout_.nb(); ++b) {
    const model::BlockCost cost = m.block_cost(int64_t(b));
    in.ops.forward_flops.push_back(cost.forward_flops);
    in.ops.backward_flops.push_back(cost.backward_flops);
    in.ops.sharded.push_back(layout_.sharded(int64_t(b)));
  }
  in.ops.stage = layout_.stage;
  in.ops.micros = options_.schedule.micros_per_replay();
  in.ops.device_sum =
      layout_.stage <= 1 || (in.ops.micros > 1 && options_.schedule.device_grad_sum);
  in.offloaded_segments = offloaded_segments();
  in.checkpoint_home = options_.zero.offload_activations;
  in.checkpoint_bytes = m.checkpoint_bytes();
  in.checkpoint_interval = m.checkpoint_interval();
  in.depth = static_cast<size_t>(options_.zero.prefetch_depth);
  in.staging_slots = options_.staging_slots;
  in.bucket_bytes = options_.zero.bucket_bytes;
  return in;
}

Status ZeroStep::check_budgets(const sched::Plan& plan) const {
  const uint64_t es = dtype_size(rt_->model.dtype());
  PinnedNeeds pn;
  pn.optimizer_state = rt_->opt.host_state_bytes();
  pn.optimizer_staging = rt_->opt.staging_bytes();
  pn.plan = plan.peak_bytes(sched::Tier::kPinnedHost);
  std::vector<int64_t> numel;
  for (size_t p = 0; p < rt_->opt.num_partitions(); ++p) numel.push_back(rt_->opt.numel(p));
  // At most: the host arena, the optimizer's staging slots and the plan's staging (its budget:
  // staging_slots of the largest NVMe partition, or fewer when fewer partitions are there).
  const int opt_slots = rt_->opt.options().staging_slots, plan_slots = options_.staging_slots;
  pn.optimizer_at = [numel, opt_slots, plan_slots](double f) {
    const OffloadedOptimizer::Split s = OffloadedOptimizer::split(numel, f);
    int on_nvme = 0;
    for (bool b : s.on_nvme) on_nvme += b ? 1 : 0;
    if (on_nvme == 0) return s.host_bytes;
    return s.host_bytes + OffloadedOptimizer::staging_bound_bytes(
                              opt_slots + std::min(plan_slots, on_nvme), s.max_nvme_numel);
  };
  pn.optimizer_fraction = rt_->opt.options().nvme_fraction;
  pn.optimizer_now = rt_->opt.host_state_bytes() + rt_->opt.staging_bytes() +
                     plan.peak_bytes_of([&](sched::BufferId id) {
                       return notes_.kinds[size_t(id)] == zero::BufferKind::kNvmeStaging;
                     });
  DeviceNeeds dn;
  dn.stage = options_.zero.stage;
  for (size_t b = 0; b < layout_.parts.num_blocks(); ++b) {
    if (!layout_.sharded(int64_t(b))) continue;
    const uint64_t shard = static_cast<uint64_t>(layout_.parts.block(b).shard_numel) * es;
    if (layout_.home[b] == Home::kPinned) pn.param_shards += shard;
    if (layout_.home[b] == Home::kDevice) dn.param_shards += shard;
  }
  if (options_.zero.offload_activations == Home::kPinned) {
    pn.checkpoints = uint64_t(offloaded_checkpoints()) * rt_->model.checkpoint_bytes();
  }
  if (options_.zero.offload_activations == Home::kDevice) {
    dn.activations = uint64_t(rt_->model.num_segments() - 1) * rt_->model.checkpoint_bytes();
  }
  STRATA_RETURN_IF_ERROR(check_pinned_budget(pn, options_.host_memory_limit));
  const gpu::MemoryInfo info = rt_->model.device().memory_info();
  dn.in_use = info.used_bytes;
  dn.plan = plan.peak_bytes(sched::Tier::kDevice);
  dn.device_optimizer = rt_->device_opt.has_value();
  dn.prefetch_depth = options_.zero.prefetch_depth;
  return check_device_budget(dn, info.limit_bytes);
}

Result<StepResult> ZeroStep::run(const int32_t* tokens, const int32_t* targets, int64_t step,
                                 int micro_batches) {
  if (tokens == nullptr || targets == nullptr) {
    return make_error(ErrorCode::kConfig, "ZeroStep::run needs tokens and targets");
  }
  if (step < 1) {
    return make_error(ErrorCode::kConfig, "ZeroStep::run: step ", step, " is not accepted (>= 1)");
  }
  if (micro_batches < 1 || (micro_batches > 1 && options_.optimizer.delayed_update_warmup >= 0)) {
    return make_error(ErrorCode::kConfig, "ZeroStep::run: ", micro_batches,
                      " micro-batches are not accepted (at least 1; 1 with the delayed update)");
  }
  const int slots = options_.schedule.micros_per_replay();
  if (slots > 1 && micro_batches != slots) {
    return make_error(ErrorCode::kConfig, "ZeroStep::run: ", micro_batches,
                      " micro-batches, but the segment-major plan runs ", slots);
  }
  const size_t bt = rt_->tokens.size() / static_cast<size_t>(slots);
  for (int k = 0; k < micro_batches; ++k) {
    STRATA_RETURN_IF_ERROR(rt_->model.check_batch(tokens + k * bt, targets + k * bt));
  }
  // Delayed update, warm-up (steps up to warmup + 1): the previous update is applied whole first,
  // so the step sees it.
  if (options_.optimizer.delayed_update_warmup >= 0 &&
      step <= options_.optimizer.delayed_update_warmup + 1) {
    STRATA_RETURN_IF_ERROR(flush());
  }
  pending_.step = step;
  last_.micros = micro_batches;
  const double accumulated = static_cast<double>(rt_->ranks) * micro_batches;
  zero::Replay replay;
  replay.step = step;
  // The segment-major plan runs every micro-batch in one replay (as the first and the last).
  replay.micros = slots > 1 ? 1 : micro_batches;
  int64_t this_update = 0;
  if (layout_.rotate) {  // the previous step's update, if it is to be applied
    this_update = pending_.adam_step;
    replay.update_grad_scale = pending_.grad_scale;
    if (pending_.next_lr >= 0.0f) rt_->opt.adam().set_lr(pending_.next_lr);
  } else {  // this step's, with no clipping and no loss scale: decide()'s multiplier
    this_update = pending_.scaling.applied() + 1;
    replay.update_grad_scale = static_cast<float>(1.0 / accumulated);
    if (pending_.lr >= 0.0f) rt_->opt.adam().set_lr(pending_.lr);
  }
  StepResult r;
  r.loss_scale = pending_.scaling.loss_scale();
  rt_->model.set_loss_scale(pending_.scaling.loss_scale());
  rt_->reset_counts();
  // One replay per micro-batch: the rotated update with the first, the unrotated one with the
  // last (where the gradients are complete).
  double loss_sum = 0.0;
  if (slots > 1) {  // one replay of every micro-batch
    replay.micro = 0;
    replay.update_step = this_update;
    std::copy(tokens, tokens + slots * bt, rt_->tokens.begin());
    std::copy(targets, targets + slots * bt, rt_->targets.begin());
    STRATA_RETURN_IF_ERROR(executor_->replay(&replay).with_context("step " + std::to_string(step)));
    for (int k = 0; k < slots; ++k) {
      STRATA_RETURN_IF_ERROR(rt_->model.select_micro(k));
      loss_sum += static_cast<double>(rt_->model.mean_loss());
    }
    STRATA_RETURN_IF_ERROR(rt_->model.select_micro(0));
  } else {
    for (int k = 0; k < micro_batches; ++k) {
      replay.micro = k;
      replay.update_step = (layout_.rotate ? k == 0 : replay.last_micro()) ? this_update : 0;
      std::copy(tokens + k * bt, tokens + (k + 1) * bt, rt_->tokens.begin());
      std::copy(targets + k * bt, targets + (k + 1) * bt, rt_->targets.begin());
      STRATA_RETURN_IF_ERROR(
          executor_->replay(&replay).with_context("step " + std::to_string(step)));
      loss_sum += static_cast<double>(rt_->model.mean_loss());
    }
  }
  // The mean loss over the ranks (every rank's micro-batch has the same weight).
  const float local = static_cast<float>(loss_sum / micro_batches);
  float total = local;
  if (rt_->ranks > 1) {
    comm::CollectiveCall call;
    call.kind = comm::CollectiveKind::kAllReduce;
    call.send = &local;
    call.recv = &total;
    call.count = 1;
    call.dtype = DType::kF32;
    rt_->count(call, &ZeroTraffic::stats);
    STRATA_RETURN_IF_ERROR(rt_->comm.start(call).wait());
  }
  last_.traffic = rt_->traffic();
  last_.lanes = rt_->lane_bytes();
  STRATA_ASSIGN_OR_RETURN(
      const StepScaling::Decision d,
      pending_.scaling.decide(rt_->stats.sum, rt_->stats.finite, step, accumulated));
  if (layout_.rotate) {
    pending_.adam_step = d.apply ? d.adam_step : 0;
    pending_.grad_scale = d.grad_scale;
    pending_.next_lr = pending_.lr;
  }
  r.loss = rt_->ranks > 1 ? total / static_cast<float>(rt_->ranks) : local;
  r.grad_norm = d.norm;
  r.skipped = !d.apply;
  return r;
}

Status ZeroStep::flush() {
  if (pending_.adam_step != 0) {
    zero::Replay replay;
    replay.step = pending_.step;
    replay.flushing = true;
    replay.update_step = pending_.adam_step;
    replay.update_grad_scale = pending_.grad_scale;
    if (pending_.next_lr >= 0.0f) rt_->opt.adam().set_lr(pending_.next_lr);
    STRATA_RETURN_IF_ERROR(executor_->replay(&replay));
    pending_.adam_step = 0;
  }
  if (rt_->device_opt)
    STRATA_RETURN_IF_ERROR(rt_->device_opt->download(rt_->opt, rt_->model.stream()));
  return gather_into_model();
}

}  // namespace strata::engine
