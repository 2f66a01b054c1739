#include "engine/zero_step.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "engine/memory_budget.h"

namespace strata::engine {

model::BlockStorage ZeroStep::block_storage(const Partitioning& parts, int stage,
                                            bool offload_activations) {
  model::BlockStorage s;
  s.checkpoints = !offload_activations;
  for (size_t b = 0; b < parts.num_blocks(); ++b) {
    s.params.push_back(stage < 3 || parts.block(b).persistent);
    s.grads.push_back(stage <= 1);
  }
  return s;
}

std::vector<int64_t> ZeroStep::optimizer_numel(const Partitioning& parts, int stage) {
  std::vector<int64_t> numel;
  for (int64_t b : partition_blocks(int64_t(parts.num_blocks()) - 1)) {
    const BlockPartition& bp = parts.block(size_t(b));
    numel.push_back(stage == 0 ? bp.numel : bp.shard_numel);
  }
  return numel;
}

Status ZeroStep::load_masters(model::Model& model, OffloadedOptimizer& optimizer,
                              const Partitioning& parts, int stage, int rank,
                              const ParamSource& source) {
  const std::vector<int64_t> blocks = partition_blocks(model);
  const std::vector<int64_t> numel = optimizer_numel(parts, stage);
  if (optimizer.num_partitions() != blocks.size()) {
    return make_error(ErrorCode::kConfig, "ZeRO: the optimizer has ", optimizer.num_partitions(),
                      " partitions for ", blocks.size(), " model blocks");
  }
  for (size_t p = 0; p < blocks.size(); ++p) {
    const BlockPartition& bp = parts.block(size_t(blocks[p]));
    if (optimizer.numel(p) != numel[p]) {
      return make_error(ErrorCode::kConfig, "ZeRO stage ", stage, ": optimizer partition ", p,
                        " has ", optimizer.numel(p), " elements, expected ", numel[p]);
    }
    const model::ElementRange own{stage == 0 ? 0 : bp.owned_begin(rank),
                                  stage == 0 ? bp.numel : bp.owned_end(rank)};
    std::vector<float> master(static_cast<size_t>(numel[p]), 0.0f);  // padding zero
    if (source) {
      STRATA_RETURN_IF_ERROR(source(blocks[p], own, master.data()));
    } else {
      std::vector<float> whole(static_cast<size_t>(bp.numel));
      STRATA_RETURN_IF_ERROR(model.download_params(blocks[p], whole.data()));
      std::copy(whole.begin() + own.begin, whole.begin() + own.end, master.begin());
    }
    // As the device holds them: rounded to the model's dtype.
    const DType dt = model.dtype();
    const auto n = static_cast<size_t>(own.end - own.begin);
    std::vector<std::byte> rounded(n * dtype_size(dt));
    convert(master.data(), DType::kF32, rounded.data(), dt, n);
    convert(rounded.data(), dt, master.data(), DType::kF32, n);
    STRATA_RETURN_IF_ERROR(optimizer.load(p, master.data(), nullptr, nullptr));
  }
  return ok_status();
}

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
                      " communicator needs device buffers; the engine reduces in pinned host "
                      "memory: use the MPI communicator");
  }
  std::unique_ptr<ZeroStep> s(new ZeroStep(model, optimizer, comm, options));
  zero::Layout& lay = s->layout_;
  lay.rank = comm.rank();
  lay.ranks = comm.size();
  lay.stage = options.stage;
  lay.layers = model.num_layers();
  lay.dt = model.dtype();
  lay.acc = options.stage >= 2 && options.fp32_grad_accum ? DType::kF32 : model.dtype();
  lay.slots =
      options.stage >= 2 && !options.device_grad_sum ? std::max(1, options.layer_major_micros) : 1;
  lay.delayed = options.delayed_update_warmup >= 0;
  STRATA_ASSIGN_OR_RETURN(lay.parts, Partitioning::create(model.block_numels(), lay.ranks,
                                                          options.persistence_threshold));
  lay.blocks = partition_blocks(model);
  lay.part_of.assign(lay.blocks.size(), 0);
  for (size_t p = 0; p < lay.blocks.size(); ++p) lay.part_of[size_t(lay.blocks[p])] = p;
  lay.home = zero::choose_homes(lay, options.offload_param, options.param_gpu_fraction);
  const bool plan_only = optimizer.options().plan_only;  // no store needed: nothing is stored
  for (Home h : lay.home) {
    if (h == Home::kNvme && options.swap_store == nullptr && !plan_only) {
      return make_error(ErrorCode::kConfig, ref(Field::kOffloadParam), " nvme needs a swap store (",
                        ref(Field::kNvmePath), " DIR[,DIR...])");
    }
  }
  const bool offload_acts = options.offload_activations != Home::kDevice;
  for (int64_t seg = 0; seg + 1 < model.num_segments(); ++seg) {
    if (model.caller_checkpoint(seg) != offload_acts) {
      return make_error(ErrorCode::kConfig, "ZeRO step: ", ref(Field::kOffloadActivations), " ",
                        offload_acts ? "needs a model that leaves its checkpoints to the engine"
                                     : "none needs a model that keeps its checkpoints",
                        " (ZeroStep::block_storage)");
    }
  }
  if (options.offload_activations == Home::kNvme && options.swap_store == nullptr && !plan_only) {
    return make_error(ErrorCode::kConfig, ref(Field::kOffloadActivations),
                      " nvme needs a swap store (", ref(Field::kNvmePath), " DIR[,DIR...])");
  }
  for (int64_t b = 0; b < model.num_blocks(); ++b) {
    if (!s->layout_.sharded(b) && model.param_block(b) == nullptr) {
      return make_error(ErrorCode::kConfig, "ZeRO stage ", options.stage, ": block ", b,
                        " must be on the device (ZeroStep::block_storage)");
    }
    if (options.stage <= 1 && model.grad_block(b) == nullptr) {
      return make_error(ErrorCode::kConfig, "ZeRO stage ", options.stage,
                        " keeps whole gradients on the device: block ", b,
                        " has none (ZeroStep::block_storage)");
    }
  }
  const std::vector<int64_t> want = optimizer_numel(s->layout_.parts, options.stage);
  if (optimizer.num_partitions() != want.size()) {
    return make_error(ErrorCode::kConfig, "ZeRO step: the optimizer has ",
                      optimizer.num_partitions(), " partitions for ", want.size(), " model blocks");
  }
  for (size_t p = 0; p < want.size(); ++p) {
    if (optimizer.numel(p) != want[p]) {
      return make_error(ErrorCode::kConfig, "ZeRO stage ", options.stage, ": optimizer partition ",
                        p, " has ", optimizer.numel(p), " elements, expected ", want[p],
                        " (ZeroStep::optimizer_numel)");
    }
  }
  const auto rows = static_cast<size_t>(model.shape().batch * model.shape().seq);
  const int slots = std::max(1, options.layer_major_micros);
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
               options.device_optimizer || options.gpu_optimizer_fraction > 0.0 || lay.delayed;
  const std::vector<bool> on_device = DeviceOptimizer::choose(
      optimizer, options.device_optimizer ? 1.0 : options.gpu_optimizer_fraction);
  bool any_on_device = false;
  for (bool b : on_device) any_on_device = any_on_device || b;
  if (any_on_device) {
    STRATA_ASSIGN_OR_RETURN(s->rt_->device_opt, DeviceOptimizer::create(optimizer, model.device(),
                                                                        model.stream(), on_device));
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
  if (options.offload_activations == Home::kNvme) swap_store = options.swap_store;
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
  in.ops.micros = std::max(1, options_.layer_major_micros);
  in.ops.device_sum = layout_.stage <= 1 || (in.ops.micros > 1 && options_.device_grad_sum);
  in.offloaded_segments = offloaded_segments();
  in.checkpoint_home = options_.offload_activations;
  in.checkpoint_bytes = m.checkpoint_bytes();
  in.checkpoint_interval = m.checkpoint_interval();
  in.depth = static_cast<size_t>(options_.prefetch_depth);
  in.staging_slots = options_.staging_slots;
  in.bucket_bytes = options_.bucket_bytes;
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
  dn.stage = options_.stage;
  for (size_t b = 0; b < layout_.parts.num_blocks(); ++b) {
    if (!layout_.sharded(int64_t(b))) continue;
    const uint64_t shard = static_cast<uint64_t>(layout_.parts.block(b).shard_numel) * es;
    if (layout_.home[b] == Home::kPinned) pn.param_shards += shard;
    if (layout_.home[b] == Home::kDevice) dn.param_shards += shard;
  }
  if (options_.offload_activations == Home::kPinned) {
    pn.checkpoints = uint64_t(offloaded_checkpoints()) * rt_->model.checkpoint_bytes();
  }
  if (options_.offload_activations == Home::kDevice) {
    dn.activations = uint64_t(rt_->model.num_segments() - 1) * rt_->model.checkpoint_bytes();
  }
  STRATA_RETURN_IF_ERROR(check_pinned_budget(pn, options_.host_memory_limit));
  const gpu::MemoryInfo info = rt_->model.device().memory_info();
  dn.in_use = info.used_bytes;
  dn.plan = plan.peak_bytes(sched::Tier::kDevice);
  dn.device_optimizer = rt_->device_opt.has_value();
  dn.prefetch_depth = options_.prefetch_depth;
  return check_device_budget(dn, info.limit_bytes);
}

Status ZeroStep::init_param_shards() {
  const DType dt = rt_->model.dtype();
  for (size_t p = 0; p < layout_.blocks.size(); ++p) {
    const int64_t b = layout_.blocks[p];
    if (!layout_.sharded(b)) continue;
    const auto n = static_cast<size_t>(rt_->opt.numel(p));  // the shard, padding included
    std::vector<float> state(3 * n);
    STRATA_RETURN_IF_ERROR(
        rt_->opt.read_state(p, state.data(), state.data() + n, state.data() + 2 * n));
    std::vector<std::byte> shard(n * dtype_size(dt));
    convert(state.data(), DType::kF32, shard.data(), dt, n);
    STRATA_RETURN_IF_ERROR(store_shard(b, shard.data()));
  }
  return ok_status();
}

Status ZeroStep::load_shard(int64_t b, void* host) {
  const size_t bytes = static_cast<size_t>(layout_.parts.block(size_t(b)).shard_numel) *
                       dtype_size(rt_->model.dtype());
  switch (layout_.home[size_t(b)]) {
    case Home::kPinned:
      std::memcpy(host, executor_->buffer(buffers_.pbuf[size_t(b)]), bytes);
      return ok_status();
    case Home::kDevice:
      return rt_->model.stream().copy_now(host, executor_->buffer(buffers_.dshard[size_t(b)]),
                                          bytes, gpu::CopyKind::kDeviceToHost);
    case Home::kNvme:
      if (scratch_.shard_io.size_bytes() < bytes) {
        STRATA_ASSIGN_OR_RETURN(scratch_.shard_io, cpu::default_pinned_pool().allocate(bytes));
      }
      STRATA_RETURN_IF_ERROR(
          rt_->swap.store->read(rt_->swap.shard(b), scratch_.shard_io.data(), bytes).wait());
      std::memcpy(host, scratch_.shard_io.data(), bytes);
      return ok_status();
  }
  return ok_status();
}

Status ZeroStep::store_shard(int64_t b, const void* host) {
  const size_t bytes = static_cast<size_t>(layout_.parts.block(size_t(b)).shard_numel) *
                       dtype_size(rt_->model.dtype());
  switch (layout_.home[size_t(b)]) {
    case Home::kPinned:
      std::memcpy(executor_->buffer(buffers_.pbuf[size_t(b)]), host, bytes);
      return ok_status();
    case Home::kDevice:
      return rt_->model.stream().copy_now(executor_->buffer(buffers_.dshard[size_t(b)]), host,
                                          bytes, gpu::CopyKind::kHostToDevice);
    case Home::kNvme:
      if (scratch_.shard_io.size_bytes() < bytes) {
        STRATA_ASSIGN_OR_RETURN(scratch_.shard_io, cpu::default_pinned_pool().allocate(bytes));
      }
      std::memcpy(scratch_.shard_io.data(), host, bytes);
      return rt_->swap.store->write(rt_->swap.shard(b), scratch_.shard_io.data(), bytes).wait();
  }
  return ok_status();
}

Status ZeroStep::gather_block(int64_t b, void* dst) {
  model::Model& m = rt_->model;
  STRATA_RETURN_IF_ERROR(gather_host(b));
  return m.stream().copy_now(dst, scratch_.host.data(),
                             static_cast<size_t>(m.block_numel(b)) * dtype_size(m.dtype()),
                             gpu::CopyKind::kHostToDevice);
}

Status ZeroStep::gather_params(int64_t b, float* host) {
  if (b < 0 || b >= rt_->model.num_blocks()) {
    return make_error(ErrorCode::kConfig, "parameter block ", b, " is not in [0, ",
                      rt_->model.num_blocks(), ")");
  }
  if (!layout_.sharded(b)) return rt_->model.download_params(b, host);
  STRATA_RETURN_IF_ERROR(gather_host(b));
  convert(scratch_.host.data(), rt_->model.dtype(), host, DType::kF32,
          static_cast<size_t>(layout_.parts.block(size_t(b)).numel));
  return ok_status();
}

Status ZeroStep::gather_host(int64_t b) {
  const DType dt = rt_->model.dtype();
  const BlockPartition& bp = layout_.parts.block(size_t(b));
  const size_t shard_bytes = static_cast<size_t>(bp.shard_numel) * dtype_size(dt);
  scratch_.host.resize(shard_bytes * static_cast<size_t>(rt_->ranks));
  std::byte* mine = scratch_.host.data() + static_cast<size_t>(rt_->rank) * shard_bytes;
  STRATA_RETURN_IF_ERROR(load_shard(b, mine));
  return rt_->comm.all_gather(mine, scratch_.host.data(), static_cast<size_t>(bp.shard_numel), dt);
}

Status ZeroStep::gather_into_model() {
  for (int64_t b = 0; b < rt_->model.num_blocks(); ++b) {
    if (layout_.sharded(b) && rt_->model.param_block(b) != nullptr) {
      STRATA_RETURN_IF_ERROR(gather_block(b, rt_->model.param_block(b)));
    }
  }
  return ok_status();
}

Status ZeroStep::forward_inference(const int32_t* tokens, const int32_t* targets) {
  model::Model& m = rt_->model;
  // Checked before the first gather (a collective): a rank that stopped here would leave the
  // others waiting.
  STRATA_RETURN_IF_ERROR(m.check_batch(tokens, targets));
  if (pending_.adam_step != 0) {
    return make_error(ErrorCode::kConfig,
                      "ZeroStep::forward_inference: an update is pending: flush() first");
  }
  const int64_t L = m.num_layers();
  // Every block on the device and every checkpoint the model's: its own forward.
  bool resident = offloaded_segments() == 0;
  for (int64_t b = 0; b <= L && resident; ++b) resident = m.param_block(b) != nullptr;
  if (resident) return m.forward(tokens, targets).status();
  const size_t es = dtype_size(m.dtype());
  // The shared block stays gathered for the head; one layer at a time goes through scratch.
  size_t need = 0;
  for (int64_t b = 0; b <= L; ++b) {
    if (layout_.sharded(b) && m.param_block(b) == nullptr) {
      need += b == L ? static_cast<size_t>(m.block_numel(b)) * es : 0;
    }
  }
  const bool layers_sharded = L > 0 && m.param_block(0) == nullptr;
  const size_t layer_bytes = layers_sharded ? static_cast<size_t>(m.block_numel(0)) * es : 0;
  need += layer_bytes;
  if (need > 0 && scratch_.block.size_bytes() < need) {
    scratch_.block = gpu::DeviceBuffer();
    STRATA_ASSIGN_OR_RETURN(scratch_.block, m.device().allocate(need));
  }
  auto* base = static_cast<std::byte*>(scratch_.block.data());
  // The offloaded checkpoints: segment s's kept input in scratch slot s % 2 (a layer reads its
  // segment's and may write the next one's).
  if (offloaded_segments() > 0) {
    if (scratch_.checkpoints.size_bytes() < 2 * m.checkpoint_bytes()) {
      STRATA_ASSIGN_OR_RETURN(scratch_.checkpoints, m.device().allocate(2 * m.checkpoint_bytes()));
    }
    for (int64_t seg = 0; seg < offloaded_segments(); ++seg) {
      STRATA_RETURN_IF_ERROR(
          m.set_checkpoint(seg, static_cast<std::byte*>(scratch_.checkpoints.data()) +
                                    static_cast<size_t>(seg % 2) * m.checkpoint_bytes()));
    }
  }
  auto params = [&](int64_t b, void* at) -> Result<const void*> {
    if (m.param_block(b) != nullptr) return static_cast<const void*>(m.param_block(b));
    STRATA_RETURN_IF_ERROR(gather_block(b, at));
    return static_cast<const void*>(at);
  };
  gpu::Stream& s = m.stream();
  STRATA_ASSIGN_OR_RETURN(const void* shared, params(L, base + layer_bytes));
  STRATA_RETURN_IF_ERROR(m.set_batch(s, tokens, targets));
  STRATA_RETURN_IF_ERROR(m.embedding_forward(s, shared));
  for (int64_t l = 0; l < L; ++l) {
    STRATA_RETURN_IF_ERROR(s.synchronize());  // the scratch is free again
    STRATA_ASSIGN_OR_RETURN(const void* p, params(l, base));
    STRATA_RETURN_IF_ERROR(m.layer_forward(s, l, p));
  }
  STRATA_RETURN_IF_ERROR(m.head_forward(s, shared));
  return s.synchronize();
}

ZeroMemory ZeroStep::memory() const {
  ZeroMemory z;
  const sched::Plan& plan = this->plan();
  const int64_t es = static_cast<int64_t>(dtype_size(rt_->model.dtype()));
  int64_t pinned_homes = 0;
  for (size_t b = 0; b < layout_.parts.num_blocks(); ++b) {
    const int64_t shard = layout_.parts.block(b).shard_numel * es;
    if (layout_.sharded(int64_t(b))) {
      z.params16 += shard;
      if (layout_.home[b] == Home::kPinned) pinned_homes += shard;
      if (layout_.home[b] == Home::kDevice) z.params_device += shard;
      if (layout_.home[b] == Home::kNvme) z.params_nvme += shard;
    }
    if (options_.stage >= 2) {  // the reduced shard, in fp32 when the micro-batches add so
      const int64_t acc = layout_.parts.block(b).shard_numel * (options_.fp32_grad_accum ? 4 : es);
      z.grads16 += acc;
      pinned_homes += acc;
    }
  }
  z.params16 += static_cast<int64_t>(rt_->model.param_bytes());
  z.params_device += static_cast<int64_t>(rt_->model.param_bytes());
  z.grads16 += static_cast<int64_t>(rt_->model.grad_bytes());
  z.grads_device = static_cast<int64_t>(rt_->model.grad_bytes());
  int64_t elements = 0;
  for (size_t p = 0; p < rt_->opt.num_partitions(); ++p) elements += rt_->opt.numel(p);
  z.master = z.exp_avg = z.exp_avg_sq = 4 * elements;
  z.optimizer_nvme = static_cast<int64_t>(rt_->opt.nvme_state_bytes());
  z.optimizer_device = rt_->device_opt ? static_cast<int64_t>(rt_->device_opt->bytes()) : 0;
  z.device_activations = static_cast<int64_t>(rt_->model.device_bytes() - rt_->model.param_bytes() -
                                              rt_->model.grad_bytes());
  z.device_working = static_cast<int64_t>(plan.peak_bytes(sched::Tier::kDevice)) -
                     (z.params_device - static_cast<int64_t>(rt_->model.param_bytes()));
  z.pinned_working = static_cast<int64_t>(plan.peak_bytes(sched::Tier::kPinnedHost)) - pinned_homes;
  // Each kind's own peak along the plan's order.
  auto peak = [&](zero::BufferKind kind, sched::Tier tier) {
    return static_cast<int64_t>(plan.peak_bytes_of([&](sched::BufferId id) {
      return notes_.kinds[size_t(id)] == kind && plan.buffer(id).tier == tier;
    }));
  };
  using sched::Tier;
  z.device_gathered = peak(zero::BufferKind::kGathered, Tier::kDevice);
  z.device_grads_in_flight = peak(zero::BufferKind::kGradBucket, Tier::kDevice);
  z.device_optimizer_io = peak(zero::BufferKind::kOptimizerIo, Tier::kDevice);
  z.pinned_gathered = peak(zero::BufferKind::kGathered, Tier::kPinnedHost);
  z.pinned_grads = peak(zero::BufferKind::kGradBucket, Tier::kPinnedHost) +
                   peak(zero::BufferKind::kGradWhole, Tier::kPinnedHost);
  z.pinned_params = peak(zero::BufferKind::kParamStaging, Tier::kPinnedHost);
  z.pinned_nvme_staging = peak(zero::BufferKind::kNvmeStaging, Tier::kPinnedHost);
  z.device_checkpoints = peak(zero::BufferKind::kCheckpoint, Tier::kDevice);
  z.pinned_checkpoints = peak(zero::BufferKind::kCheckpoint, Tier::kPinnedHost);
  if (options_.offload_activations == Home::kNvme) {
    z.nvme_checkpoints =
        offloaded_checkpoints() * static_cast<int64_t>(rt_->model.checkpoint_bytes());
  }
  return z;
}

std::vector<bool> ZeroStep::active_tasks(int micro, int micros, bool update) const {
  std::vector<bool> on(notes_.when.size(), true);
  for (size_t t = 0; t < on.size(); ++t) {
    switch (notes_.when[t]) {
      case zero::RunsWhen::kEvery: break;
      case zero::RunsWhen::kUpdate: on[t] = update; break;
      case zero::RunsWhen::kNoUpdate: on[t] = !update; break;
      case zero::RunsWhen::kLastMicro: on[t] = micro + 1 == micros; break;
    }
  }
  return on;
}

Result<sched::Prediction> ZeroStep::predict(const sched::Rates& rates, int micro_batches) const {
  // The replays of a step in steady state (an update applied): one (the segment-major plan runs
  // every micro-batch in it), or one per micro-batch, the update with the first (rotated) or the
  // last, the middle ones alike.
  const int k = options_.layer_major_micros > 1 ? 1 : std::max(1, micro_batches);
  sched::Prediction sum;
  auto add = [&](int micro, double times) -> Status {
    const bool update = layout_.rotate ? micro == 0 : micro + 1 == k;
    const std::vector<bool> on = active_tasks(micro, k, update);
    STRATA_ASSIGN_OR_RETURN(const sched::Prediction p, sched::simulate(plan(), rates, &on));
    sum.step_s += times * p.step_s;
    sum.exposed_s += times * p.exposed_s;
    for (int l = 0; l < sched::kNumLanes; ++l) sum.busy_s[l] += times * p.busy_s[l];
    for (int w = 0; w < sched::kNumWorkKinds; ++w) sum.work[w] += times * p.work[w];
    return ok_status();
  };
  STRATA_RETURN_IF_ERROR(add(0, 1.0));
  if (k > 2) STRATA_RETURN_IF_ERROR(add(1, double(k - 2)));
  if (k > 1) STRATA_RETURN_IF_ERROR(add(k - 1, 1.0));
  return sum;
}

ZeroTraffic ZeroStep::expected_traffic(int micro_batches) const {
  ZeroTraffic t;
  const uint64_t n = static_cast<uint64_t>(rt_->ranks);
  const uint64_t es = dtype_size(rt_->model.dtype());
  const auto k = static_cast<uint64_t>(std::max(1, micro_batches));
  const uint64_t reductions = options_.stage >= 2 && !options_.device_grad_sum ? k : 1;
  const uint64_t gathers = options_.layer_major_micros > 1 ? 1 : k;
  for (size_t b = 0; b < layout_.parts.num_blocks(); ++b) {
    const BlockPartition& bp = layout_.parts.block(b);
    const uint64_t shard_bytes = static_cast<uint64_t>(bp.shard_numel) * es;
    const uint64_t one = (n - 1) * shard_bytes;  // a ring reduce-scatter or all-gather
    t.grad_reduce_scatter += reductions * one;
    if (options_.stage == 0) t.grad_all_gather += one;
    // Stage 3: gathers for the forward and the backward instead of one after the update; the
    // shared block is gathered once (its forward copy serves the head backward too).
    if (layout_.sharded(int64_t(b))) {
      t.param_all_gather += gathers * (int64_t(b) != rt_->model.num_layers() ? 2 : 1) * one;
    } else if (options_.stage >= 1) {
      t.param_all_gather += one;
    }
  }
  // Statistics: 2 doubles per block per rank, all-gathered (stages 1-3); the loss: an
  // all-reduce of one float (the textbook formula's integer division).
  if (options_.stage >= 1) t.stats += (n - 1) * layout_.parts.num_blocks() * 16;
  t.stats += 2 * (n - 1) * 4 / n;
  return t;
}

Result<StepResult> ZeroStep::run(const int32_t* tokens, const int32_t* targets, int64_t step,
                                 int micro_batches) {
  if (tokens == nullptr || targets == nullptr) {
    return make_error(ErrorCode::kConfig, "ZeroStep::run needs tokens and targets");
  }
  if (step < 1) {
    return make_error(ErrorCode::kConfig, "ZeroStep::run: step ", step, " is not accepted (>= 1)");
  }
  if (micro_batches < 1 || (micro_batches > 1 && options_.delayed_update_warmup >= 0)) {
    return make_error(ErrorCode::kConfig, "ZeroStep::run: ", micro_batches,
                      " micro-batches are not accepted (at least 1; 1 with the delayed update)");
  }
  const int slots = std::max(1, options_.layer_major_micros);
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
  if (options_.delayed_update_warmup >= 0 && step <= options_.delayed_update_warmup + 1) {
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

ZeroStep::ParamSource slices_of(std::function<std::vector<float>(int64_t block)> make) {
  return [make = std::move(make)](int64_t block, model::ElementRange range, float* host) {
    const std::vector<float> v = make(block);
    if (range.begin < 0 || range.end < range.begin || range.end > int64_t(v.size())) {
      return make_error(ErrorCode::kInternal, "block ", block, ": elements [", range.begin, ", ",
                        range.end, ") asked of ", v.size());
    }
    std::copy(v.begin() + range.begin, v.begin() + range.end, host);
    return ok_status();
  };
}

}  // namespace strata::engine
