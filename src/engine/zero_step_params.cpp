// ZeroStep's parameters outside the replays: the blocks a model holds on the device, the
// optimizer's partitions and its fp32 masters, the stage-3 shards at their homes (loading and
// storing them, gathering a block for inference, saving and flush), and the inference forward.
#include <algorithm>
#include <cstring>
#include <string>

#include "engine/zero_step.h"

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
