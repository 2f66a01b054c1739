#include "engine/session.h"

#include <algorithm>
#include <utility>

#include "core/dtype.h"
#include "engine/decay_ranges.h"
#include "engine/memory_budget.h"

namespace strata::engine {

namespace {
constexpr uint64_t kExtentSlack = uint64_t{8} << 20;  // per stored object, whole extents

OffloadedOptimizerOptions optimizer_options(const EngineConfig& c, const SessionInputs& in,
                                            nvme::SwapStore* store, int rank) {
  OffloadedOptimizerOptions oo;
  oo.nvme_fraction = c.optimizer.offload == Home::kNvme ? c.optimizer.nvme_fraction : 0.0;
  oo.store = store;
  // The plan stages through its own buffers; the serial step through the optimizer's.
  oo.staging_slots = c.planned() ? 1 : c.storage.nvme_buffer_count;
  oo.key_base = Session::optimizer_key(rank, 0);
  oo.plan_only = in.plan_only;
  oo.pool = in.pool;
  return oo;
}

// host_memory_limit against the optimizer's pinned bytes, before they are allocated.
Status check_optimizer_pinned(const EngineConfig& c, const std::vector<int64_t>& numel,
                              const OffloadedOptimizerOptions& oo) {
  if (c.storage.host_memory_limit == 0 || oo.plan_only) return ok_status();
  PinnedNeeds pn;
  pn.optimizer_state = OffloadedOptimizer::split(numel, oo.nvme_fraction).host_bytes;
  pn.optimizer_staging = OffloadedOptimizer::pinned_bytes_needed(numel, oo) - pn.optimizer_state;
  pn.optimizer_at = [&numel, oo](double fraction) {
    OffloadedOptimizerOptions o = oo;
    o.nvme_fraction = fraction;
    return OffloadedOptimizer::pinned_bytes_needed(numel, o);
  };
  pn.optimizer_fraction = oo.nvme_fraction;
  pn.optimizer_now = pn.optimizer_state + pn.optimizer_staging;
  return check_pinned_budget(pn, c.storage.host_memory_limit);
}

OffloadStepOptions step_options(const EngineConfig& c) {
  OffloadStepOptions so;
  so.grad_clip = c.optimizer.grad_clip;
  so.loss_scaling = c.loss_scaling;
  return so;
}

ZeroStepOptions zero_options(const EngineConfig& c, const SessionInputs& in, nvme::SwapStore* store,
                             int rank) {
  ZeroStepOptions zo;
  zo.step = step_options(c);
  zo.zero = c.zero;
  zo.optimizer = c.optimizer;
  zo.executor.cpu_threads = in.host_threads;
  zo.executor.cpu_workers = std::min(2, in.host_threads);
  zo.executor.trace = true;
  zo.executor.pool = in.pool;
  zo.fp32_grad_accum = c.zero.stage >= 2 && c.schedule.grad_accum > 1 &&
                       c.schedule.grad_accum_dtype == DType::kF32 && c.precision != DType::kF32;
  zo.schedule = c.schedule;
  zo.staging_slots = c.storage.nvme_buffer_count;
  zo.inject_inf_step = in.inject_inf_step;
  zo.device_comm = in.device_comm;
  zo.swap_store = store;
  zo.shard_key_base = Session::shard_key(rank, 0);
  zo.checkpoint_key_base = Session::checkpoint_key(rank, 0);
  zo.host_memory_limit = c.storage.host_memory_limit;
  return zo;
}
}  // namespace

Result<SessionLayout> Session::prepare(const EngineConfig& config,
                                       const std::vector<int64_t>& block_numel, int ranks) {
  SessionLayout l;
  STRATA_ASSIGN_OR_RETURN(
      l.parts, Partitioning::create(block_numel, ranks, config.zero.persistence_threshold));
  l.storage = ZeroStep::block_storage(l.parts, config.zero.stage,
                                      config.zero.offload_activations != Home::kDevice);
  l.optimizer_numel = ZeroStep::optimizer_numel(l.parts, config.zero.stage);
  return l;
}

uint64_t Session::swap_capacity(const EngineConfig& config, const model::Model& model,
                                const std::vector<int64_t>& numel) {
  const auto nb = static_cast<uint64_t>(model.num_blocks());
  uint64_t elements = 0;
  for (int64_t n : numel) elements += static_cast<uint64_t>(n);
  uint64_t bytes = 12 * elements + kExtentSlack * nb;
  if (config.param_home() == Home::kNvme) {
    bytes += dtype_size(model.dtype()) * elements + kExtentSlack * nb;
  }
  if (config.zero.offload_activations == Home::kNvme) {
    bytes +=
        static_cast<uint64_t>(model.num_segments()) * (model.checkpoint_bytes() + kExtentSlack);
  }
  return bytes;
}

uint64_t Session::optimizer_key(int rank, size_t p) {
  return (static_cast<uint64_t>(rank) << 32) + p;
}
uint64_t Session::shard_key(int rank, int64_t b) {
  return optimizer_key(rank, 0) + (uint64_t{1} << 31) + static_cast<uint64_t>(b);
}
uint64_t Session::checkpoint_key(int rank, int64_t s) {
  return shard_key(rank, 0) + (uint64_t{1} << 24) + static_cast<uint64_t>(s);
}

uint64_t Session::swap_extent(const EngineConfig& config) {
  return std::max<uint64_t>(uint64_t{1} << 20, config.storage.nvme_block_size);
}

Result<std::unique_ptr<Session>> Session::create(const EngineConfig& config, gpu::Device& device,
                                                 comm::Communicator& comm, model::Model& model,
                                                 const SessionInputs& inputs) {
  // A given store, or none at all (plan_only), needs no directories.
  STRATA_RETURN_IF_ERROR(config.validate(inputs.store != nullptr || inputs.plan_only));
  if (config.schedule.microbatch_order == MicrobatchOrder::kAuto || config.offload_auto ||
      config.zero.collectives == Collectives::kAuto) {
    return make_error(ErrorCode::kConfig, "engine session: ",
                      config.offload_auto ? ref(Field::kOffloadAuto)
                      : config.zero.collectives == Collectives::kAuto
                          ? ref(Field::kCollectives) + " auto"
                          : ref(Field::kMicrobatchOrder) + " auto",
                      " is the planner's to resolve (planner::choose) before a session");
  }
  if (&model.device() != &device) {
    return make_error(ErrorCode::kConfig, "engine session: the model lives on another device (",
                      model.device().name(), ", not ", device.name(), ")");
  }
  const int rank = comm.rank(), ranks = comm.size();
  if (!config.planned() && ranks > 1) {
    return make_error(ErrorCode::kConfig, ref(Field::kSchedule), " ",
                      schedule_name(config.schedule.kind), " runs one rank; ", ranks,
                      " ranks need ", ref(Field::kSchedule), " planned");
  }
  if (config.precision != model.dtype()) {
    return make_error(ErrorCode::kConfig, ref(Field::kPrecision), " ", dtype_name(config.precision),
                      " differs from the model's ", dtype_name(model.dtype()));
  }
  std::unique_ptr<Session> s(new Session());
  s->config_ = config;
  s->model_ = &model;
  s->comm_ = &comm;
  s->device_comm_ = inputs.device_comm;
  s->host_threads_ = inputs.host_threads;
  STRATA_ASSIGN_OR_RETURN(SessionLayout layout, prepare(config, model.block_numels(), ranks));
  s->parts_ = std::move(layout.parts);
  s->numel_ = std::move(layout.optimizer_numel);
  s->store_ = inputs.store;
  if (config.uses_nvme() && !inputs.plan_only && s->store_ == nullptr) {
    nvme::SwapStoreOptions so;
    so.dirs = config.storage.nvme_paths;
    so.block_bytes = config.storage.nvme_block_size;
    so.extent_bytes = swap_extent(config);
    so.queue.queue_depth = static_cast<uint32_t>(config.storage.nvme_queue_depth);
    so.capacity_bytes = swap_capacity(config, model, s->numel_);
    STRATA_ASSIGN_OR_RETURN(s->own_store_, nvme::SwapStore::open(so));
    s->store_ = s->own_store_.get();
  }
  const OffloadedOptimizerOptions oo = optimizer_options(config, inputs, s->store_, rank);
  STRATA_RETURN_IF_ERROR(check_optimizer_pinned(config, s->numel_, oo));
  STRATA_ASSIGN_OR_RETURN(s->optimizer_, OffloadedOptimizer::create(
                                             s->numel_, cpu::CpuAdam(config.optimizer.adam), oo));
  // Weight decay on the parameters the rule names only (each partition's part of its block).
  if (config.optimizer.decay_on != model::DecayRule::kAll &&
      config.optimizer.adam.weight_decay != 0.0f) {
    const std::vector<int64_t> blocks = partition_blocks(model);
    for (size_t p = 0; p < blocks.size(); ++p) {
      const BlockPartition& bp = s->parts_.block(size_t(blocks[p]));
      const int64_t begin = config.zero.stage == 0 ? 0 : bp.owned_begin(rank);
      s->optimizer_->set_decayed(
          p, clip_ranges(model.decayed_ranges(blocks[p], config.optimizer.decay_on), begin,
                         s->numel_[p]));
    }
  }
  // Several micro-batches that add up on the device (stages 0-1, or device_grad_sum): a tied
  // head's gradient is kept apart until the last one (Model::set_separate_head_grads), the order
  // both micro-batch orders keep.
  STRATA_RETURN_IF_ERROR(
      model.set_separate_head_grads((config.zero.stage <= 1 || config.schedule.device_grad_sum) &&
                                    config.schedule.grad_accum > 1));
  std::optional<StepScaling::State> restored;
  if (!inputs.plan_only) {
    STRATA_RETURN_IF_ERROR(ZeroStep::load_masters(model, *s->optimizer_, s->parts_,
                                                  config.zero.stage, rank, inputs.init));
    if (inputs.restore) {
      STRATA_ASSIGN_OR_RETURN(restored, inputs.restore(*s->optimizer_));
    }
  }
  if (config.planned()) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ZeroStep> z,
                            ZeroStep::create(model, *s->optimizer_, comm,
                                             zero_options(config, inputs, s->store_, rank)));
    s->zero_ = z.get();
    s->step_ = std::move(z);
  } else {
    STRATA_ASSIGN_OR_RETURN(s->step_,
                            SerialStep::create(model, *s->optimizer_, step_options(config)));
  }
  if (restored) s->step_->restore_scaling(*restored);
  return s;
}

}  // namespace strata::engine
