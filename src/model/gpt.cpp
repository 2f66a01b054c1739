#include "model/gpt.h"

#include <algorithm>
#include <cstring>

#include "model/gpt_internal.h"
#include "model/init.h"

namespace strata::model {

GptModel::GptModel(gpu::Device& device, const GptConfig& config, const RunShape& shape)
    : device_(device), k_ops_(device.kernels()), config_(config), shape_(shape) {
  const int64_t l = config.layers;
  k_ = (shape.checkpoint_interval <= 0 || shape.checkpoint_interval >= l)
           ? l
           : shape.checkpoint_interval;
  ll_ = layer_layout(config);
  sl_ = shared_layout(config);
}

GptModel::~GptModel() {
  if (stream_) (void)stream_->synchronize();
}

Result<std::unique_ptr<GptModel>> GptModel::create(gpu::Device& device, const GptConfig& config,
                                                   const RunShape& shape,
                                                   const BlockStorage& storage) {
  STRATA_RETURN_IF_ERROR(config.validate());
  STRATA_RETURN_IF_ERROR(shape.validate(config));
  std::unique_ptr<GptModel> model(new GptModel(device, config, shape));
  STRATA_ASSIGN_OR_RETURN(model->stream_, device.create_stream());
  STRATA_RETURN_IF_ERROR(
      model->allocate_all(storage).with_context("allocating GPT (" + config.describe() + ", " +
                                                std::to_string(config.num_params()) + " params)"));
  return model;
}

Result<gpu::DeviceBuffer> GptModel::alloc(size_t bytes) {
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer buf, device_.allocate(std::max<size_t>(bytes, 1)));
  device_bytes_ += buf.size_bytes();
  return buf;
}

int64_t GptModel::block_numel(int64_t block) const {
  return block == config_.layers ? sl_.numel : ll_.numel;
}

int64_t GptModel::block_numel(const GptConfig& config, int64_t block) {
  return block == config.layers ? shared_layout(config).numel : layer_layout(config).numel;
}

ModelProbe GptModel::probe(const GptConfig& config) {
  ModelProbe p;
  p.make = [config](gpu::Device& device, int64_t layers,
                    const RunShape& shape) -> Result<std::unique_ptr<Model>> {
    GptConfig c = config;
    c.layers = layers;
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> m, create(device, c, shape));
    STRATA_RETURN_IF_ERROR(m->init_params(1));
    return std::unique_ptr<Model>(std::move(m));
  };
  p.key = std::string(dtype_name(config.dtype)) + " C=" + std::to_string(config.channels) +
          " H=" + std::to_string(config.heads) + " V=" + std::to_string(config.vocab);
  return p;
}

std::vector<int64_t> GptModel::block_numels(const GptConfig& config) {
  std::vector<int64_t> numel;
  for (int64_t b = 0; b <= config.layers; ++b) numel.push_back(block_numel(config, b));
  return numel;
}

Status GptModel::allocate_all(const BlockStorage& storage) {
  const auto blocks = static_cast<size_t>(num_blocks());
  for (const auto* v : {&storage.params, &storage.grads}) {
    if (!v->empty() && v->size() != blocks) {
      return make_error(ErrorCode::kConfig, "block storage names ", v->size(),
                        " blocks; the model has ", blocks);
    }
  }
  const size_t es = dtype_size(config_.dtype);
  const auto n = static_cast<size_t>(shape_.batch * shape_.seq);  // rows B*T
  const auto c = static_cast<size_t>(config_.channels);
  const auto nh = static_cast<size_t>(config_.heads);
  const auto vp = static_cast<size_t>(config_.vp());
  for (int64_t b = 0; b < num_blocks(); ++b) {
    const size_t bytes = static_cast<size_t>(block_numel(b)) * es;
    const auto i = static_cast<size_t>(b);
    gpu::DeviceBuffer p, g;
    if (storage.params.empty() || storage.params[i]) {
      STRATA_ASSIGN_OR_RETURN(p, alloc(bytes));
      param_bytes_ += p.size_bytes();
    }
    if (storage.grads.empty() || storage.grads[i]) {
      STRATA_ASSIGN_OR_RETURN(g, alloc(bytes));
      grad_bytes_ += g.size_bytes();
    }
    params_.push_back(std::move(p));
    grads_.push_back(std::move(g));
  }
  const int64_t segments = (config_.layers + k_ - 1) / k_;
  for (int64_t s = 0; s < segments; ++s) {
    gpu::DeviceBuffer x;
    if (storage.checkpoints || s + 1 == segments) {
      STRATA_ASSIGN_OR_RETURN(x, alloc(n * c * es));
    }
    checkpoint_at_.push_back(x.data());
    checkpoints_.push_back(std::move(x));
  }
  for (int64_t s = 0; s < k_; ++s) {
    auto a = std::make_unique<Activations>();
    if (s > 0) {
      STRATA_ASSIGN_OR_RETURN(a->x_in, alloc(n * c * es));
    }
    STRATA_ASSIGN_OR_RETURN(a->ln1, alloc(n * c * es));
    STRATA_ASSIGN_OR_RETURN(a->ln1_mean, alloc(n * 4));
    STRATA_ASSIGN_OR_RETURN(a->ln1_rstd, alloc(n * 4));
    STRATA_ASSIGN_OR_RETURN(a->qkv, alloc(n * 3 * c * es));
    STRATA_ASSIGN_OR_RETURN(a->atty, alloc(n * c * es));
    STRATA_ASSIGN_OR_RETURN(a->lse, alloc(n * nh * 4));
    STRATA_ASSIGN_OR_RETURN(a->res2, alloc(n * c * es));
    STRATA_ASSIGN_OR_RETURN(a->ln2, alloc(n * c * es));
    STRATA_ASSIGN_OR_RETURN(a->ln2_mean, alloc(n * 4));
    STRATA_ASSIGN_OR_RETURN(a->ln2_rstd, alloc(n * 4));
    STRATA_ASSIGN_OR_RETURN(a->fch, alloc(n * 4 * c * es));
    STRATA_ASSIGN_OR_RETURN(a->fch_gelu, alloc(n * 4 * c * es));
    sets_.push_back(std::move(a));
  }
  STRATA_ASSIGN_OR_RETURN(x_final_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(lnf_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(lnf_mean_, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(lnf_rstd_, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(logits_, alloc(n * vp * es));
  STRATA_ASSIGN_OR_RETURN(losses_, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(tokens_, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(targets_, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(tmp_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(dres_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(dbuf_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(dqkv_, alloc(n * 3 * c * es));
  STRATA_ASSIGN_OR_RETURN(d4a_, alloc(n * 4 * c * es));
  STRATA_ASSIGN_OR_RETURN(d4b_, alloc(n * 4 * c * es));
  STRATA_ASSIGN_OR_RETURN(host_losses_, cpu::default_pinned_pool().allocate(size_t(n) * 4));
  STRATA_ASSIGN_OR_RETURN(host_batch_, cpu::default_pinned_pool().allocate(size_t(n) * 8));
  STRATA_ASSIGN_OR_RETURN(batch_copied_, device_.create_event());
  return zero_grad();
}

void* GptModel::layer_input(int64_t l) const {
  if (l % k_ == 0) return checkpoint_at_[static_cast<size_t>(l / k_)];
  return sets_[static_cast<size_t>(l % k_)]->x_in.data();
}

void* GptModel::layer_output(int64_t l) const {
  return l + 1 == config_.layers ? x_final_.data() : layer_input(l + 1);
}

GptModel::Activations& GptModel::acts(int64_t l) const {
  return *sets_[static_cast<size_t>(l % k_)];
}

Status GptModel::set_checkpoint(int64_t seg, void* at) {
  if (seg < 0 || seg >= num_segments() || !caller_checkpoint(seg)) {
    return make_error(ErrorCode::kConfig, "GptModel::set_checkpoint(", seg,
                      "): not a segment whose kept input the caller holds");
  }
  checkpoint_at_[static_cast<size_t>(seg)] = at;
  return ok_status();
}

size_t GptModel::checkpoint_bytes() const {
  return static_cast<size_t>(shape_.batch * shape_.seq * config_.channels) *
         dtype_size(config_.dtype);
}

Status GptModel::check_resident(bool grads) const {
  for (int64_t seg = 0; seg < num_segments(); ++seg) {
    if (checkpoint_at_[static_cast<size_t>(seg)] == nullptr) {
      return make_error(ErrorCode::kConfig, "the kept input of checkpoint segment ", seg,
                        " is the engine's (BlockStorage::checkpoints): use the per-layer entry "
                        "points");
    }
  }
  for (int64_t b = 0; b < num_blocks(); ++b) {
    if (param_block(b) == nullptr || (grads && grad_block(b) == nullptr)) {
      return make_error(ErrorCode::kConfig, "block ", b,
                        " is not resident on the device (its parameters or gradients are kept "
                        "by the engine): use the per-layer entry points");
    }
  }
  return ok_status();
}

Status GptModel::init_params(uint64_t seed) {
  for (int64_t b = 0; b < num_blocks(); ++b) {
    if (param_block(b) == nullptr) continue;  // kept by the engine (init_block gives its values)
    const std::vector<float> host = init_block(config_, b, seed);
    STRATA_RETURN_IF_ERROR(upload_params(b, host.data()));
  }
  return ok_status();
}

Status GptModel::upload_params(int64_t block, const float* host) {
  if (block < 0 || block >= num_blocks()) {
    return make_error(ErrorCode::kConfig, "parameter block ", block, " is not in [0, ",
                      num_blocks(), ")");
  }
  if (param_block(block) == nullptr) {
    return make_error(ErrorCode::kConfig, "block ", block,
                      " has no parameters on the device (the engine keeps them sharded)");
  }
  const auto numel = static_cast<size_t>(block_numel(block));
  std::vector<char> staging(numel * dtype_size(config_.dtype));
  convert(host, DType::kF32, staging.data(), config_.dtype, numel);
  return stream_->copy_now(param_block(block), staging.data(), staging.size(),
                           gpu::CopyKind::kHostToDevice);
}

Status GptModel::copy_block(int64_t block, const gpu::DeviceBuffer& buf, float* host) {
  if (block < 0 || block >= num_blocks()) {
    return make_error(ErrorCode::kConfig, "parameter block ", block, " is not in [0, ",
                      num_blocks(), ")");
  }
  if (buf.data() == nullptr) {
    return make_error(ErrorCode::kConfig, "block ", block,
                      " is not on the device (the engine keeps it sharded)");
  }
  const auto numel = static_cast<size_t>(block_numel(block));
  std::vector<char> staging(numel * dtype_size(config_.dtype));
  STRATA_RETURN_IF_ERROR(
      stream_->copy_now(staging.data(), buf.data(), staging.size(), gpu::CopyKind::kDeviceToHost));
  convert(staging.data(), config_.dtype, host, DType::kF32, numel);
  return ok_status();
}

Status GptModel::download_params(int64_t block, float* host) {
  if (block < 0 || block >= num_blocks()) return copy_block(block, params_[0], host);
  return copy_block(block, params_[static_cast<size_t>(block)], host);
}

Status GptModel::download_grads(int64_t block, float* host) {
  if (block < 0 || block >= num_blocks()) return copy_block(block, grads_[0], host);
  return copy_block(block, grads_[static_cast<size_t>(block)], host);
}

Status GptModel::check_layer(int64_t l) const {
  if (l < 0 || l >= config_.layers) {
    return make_error(ErrorCode::kConfig, "layer ", l, " is not in [0, ", config_.layers, ")");
  }
  return ok_status();
}

Status GptModel::zero_grad() {
  for (auto& g : grads_) {
    if (g.data() != nullptr) STRATA_RETURN_IF_ERROR(stream_->memset(g.data(), 0, g.size_bytes()));
  }
  return ok_status();
}

Status GptModel::check_batch(const int32_t* tokens, const int32_t* targets) const {
  const int64_t n = shape_.batch * shape_.seq;
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab) {
      return make_error(ErrorCode::kConfig, "token ", tokens[i], " at position ", i,
                        " is not in [0, vocab=", config_.vocab, ")");
    }
    if (targets != nullptr && targets[i] >= config_.vocab) {
      return make_error(ErrorCode::kConfig, "target ", targets[i], " at position ", i,
                        " is not below vocab=", config_.vocab);
    }
  }
  return ok_status();
}

Status GptModel::set_batch(gpu::Stream& s, const int32_t* tokens, const int32_t* targets) {
  STRATA_RETURN_IF_ERROR(check_batch(tokens, targets));
  const int64_t n = shape_.batch * shape_.seq;
  int64_t valid = 0;
  for (int64_t i = 0; targets != nullptr && i < n; ++i) valid += targets[i] >= 0 ? 1 : 0;
  const auto bytes = static_cast<size_t>(n) * 4;
  STRATA_RETURN_IF_ERROR(batch_copied_->synchronize());  // the staging is reused
  std::memcpy(host_batch_.bytes(), tokens, bytes);
  STRATA_RETURN_IF_ERROR(
      s.copy(tokens_.data(), host_batch_.bytes(), bytes, gpu::CopyKind::kHostToDevice));
  have_targets_ = targets != nullptr;
  valid_targets_ = valid;
  losses_ready_ = false;
  if (targets != nullptr) {
    std::memcpy(host_batch_.bytes() + bytes, targets, bytes);
    STRATA_RETURN_IF_ERROR(
        s.copy(targets_.data(), host_batch_.bytes() + bytes, bytes, gpu::CopyKind::kHostToDevice));
  }
  return s.record(*batch_copied_);
}

Result<float> GptModel::forward(const int32_t* tokens, const int32_t* targets) {
  STRATA_RETURN_IF_ERROR(check_resident(/*grads=*/false));
  gpu::Stream& s = *stream_;
  const void* shared = param_block(config_.layers);
  STRATA_RETURN_IF_ERROR(set_batch(s, tokens, targets));
  STRATA_RETURN_IF_ERROR(embedding_forward(s, shared));
  for (int64_t l = 0; l < config_.layers; ++l) {
    STRATA_RETURN_IF_ERROR(layer_forward(s, l, param_block(l)));
  }
  STRATA_RETURN_IF_ERROR(head_forward(s, shared));
  STRATA_RETURN_IF_ERROR(s.synchronize());
  return mean_loss();
}

float GptModel::mean_loss() const {
  if (!losses_ready_ || valid_targets_ == 0) return 0.0f;
  double sum = 0.0;  // fixed order on the host
  const int64_t n = shape_.batch * shape_.seq;
  for (int64_t i = 0; i < n; ++i) sum += host_losses_.as<float>()[i];
  return static_cast<float>(sum / static_cast<double>(valid_targets_));
}

Status GptModel::backward() {
  if (!have_targets_) {
    return make_error(ErrorCode::kConfig, "GptModel::backward needs a forward with targets first");
  }
  STRATA_RETURN_IF_ERROR(check_resident(/*grads=*/true));
  gpu::Stream& s = *stream_;
  const void* shared = param_block(config_.layers);
  void* shared_grads = grad_block(config_.layers);
  STRATA_RETURN_IF_ERROR(head_backward(s, shared, shared_grads));
  for (int64_t seg = num_segments() - 1; seg >= 0; --seg) {
    const int64_t first = segment_begin(seg);
    const int64_t end = segment_end(seg);
    if (seg != num_segments() - 1) {
      for (int64_t l = first; l < end; ++l) {
        STRATA_RETURN_IF_ERROR(layer_recompute(s, l, param_block(l)));
      }
    }
    for (int64_t l = end - 1; l >= first; --l) {
      STRATA_RETURN_IF_ERROR(layer_backward(s, l, param_block(l), grad_block(l)));
    }
  }
  STRATA_RETURN_IF_ERROR(embedding_backward(s, shared_grads));
  have_targets_ = false;  // the logits now hold gradients of a consumed loss
  return s.synchronize();
}

std::vector<ElementRange> GptModel::decayed_ranges(int64_t block, DecayRule rule) const {
  TensorSpan t[12];
  const int n = block == config_.layers ? shared_tensors(config_, t) : layer_tensors(config_, t);
  std::vector<ElementRange> out;
  for (int i = 0; i < n; ++i) {
    // GPT-2's matrices (rows > 1: wte, wpe, qkvw, attprojw, fcw, fcprojw) are exactly the
    // tensors that are neither a bias nor a LayerNorm weight, so both rules choose them.
    const bool decayed = rule == DecayRule::kAll || t[i].rows > 1;
    if (!decayed) continue;
    const ElementRange r{t[i].offset, t[i].offset + t[i].numel};
    if (!out.empty() && out.back().end == r.begin) {
      out.back().end = r.end;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

GptModel::BlockCost GptModel::block_cost(int64_t block) const {
  const auto es = static_cast<int64_t>(dtype_size(config_.dtype));
  const auto n = static_cast<double>(shape_.batch * shape_.seq);
  const auto c = static_cast<double>(config_.channels);
  BlockCost cost;
  cost.param_bytes = block_numel(block) * es;
  cost.checkpoint_bytes = shape_.batch * shape_.seq * config_.channels * es;
  if (block == config_.layers) {
    // Logits (n x Vp x C) forward; dlogits^T.lnf and dlogits.wte backward.
    cost.forward_flops = 2.0 * n * static_cast<double>(config_.vp()) * c;
  } else {
    // qkv 3C^2, attproj C^2, fc 4C^2, fcproj 4C^2 per row; attention QK^T and AV over the
    // causal half: 2 * (2 * T * C / 2) per row.
    cost.forward_flops = 2.0 * n * 12.0 * c * c + 2.0 * n * static_cast<double>(shape_.seq) * c;
    const int64_t rows = shape_.batch * shape_.seq;
    const int64_t ch = config_.channels;
    // ln1, qkv, atty, res2, ln2, fch, fch_gelu in the dtype; 4 row statistics and the lse in fp32.
    cost.activation_bytes =
        rows * ch * (1 + 3 + 1 + 1 + 1 + 4 + 4) * es + rows * 4 * 4 + rows * config_.heads * 4;
  }
  cost.backward_flops = 2.0 * cost.forward_flops;
  return cost;
}

Status GptModel::logits_to_host(std::vector<float>& out) {
  const int64_t n = shape_.batch * shape_.seq;
  const int64_t vp = config_.vp();
  std::vector<char> staging(static_cast<size_t>(n * vp) * dtype_size(config_.dtype));
  STRATA_RETURN_IF_ERROR(stream_->copy_now(staging.data(), logits_.data(), staging.size(),
                                           gpu::CopyKind::kDeviceToHost));
  out.resize(static_cast<size_t>(n * config_.vocab));
  for (int64_t r = 0; r < n; ++r) {
    convert(staging.data() + static_cast<size_t>(r * vp) * dtype_size(config_.dtype), config_.dtype,
            out.data() + r * config_.vocab, DType::kF32, static_cast<size_t>(config_.vocab));
  }
  return ok_status();
}

}  // namespace strata::model
