#include "model/gpt.h"

#include <algorithm>

#include "model/gpt_internal.h"
#include "model/init.h"

namespace strata::model {

GptModel::GptModel(gpu::Device& device, const GptConfig& config, const RunShape& shape)
    : BlockModel(device, shape, config.dtype, config.layers, config.vocab, config.channels,
                 "GptModel"),
      config_(config) {
  ll_ = layer_layout(config);
  sl_ = shared_layout(config);
}

GptModel::~GptModel() {
  if (stream_) (void)stream_->synchronize();  // before the activations go
}

Result<std::unique_ptr<GptModel>> GptModel::create(gpu::Device& device, const GptConfig& config,
                                                   const RunShape& shape,
                                                   const BlockStorage& storage) {
  STRATA_RETURN_IF_ERROR(config.validate());
  STRATA_RETURN_IF_ERROR(shape.validate(config));
  std::unique_ptr<GptModel> model(new GptModel(device, config, shape));
  STRATA_RETURN_IF_ERROR(
      model->allocate(storage).with_context("allocating GPT (" + config.describe() + ", " +
                                            std::to_string(config.num_params()) + " params)"));
  return model;
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

Status GptModel::allocate_family() {
  const size_t es = dtype_size(config_.dtype);
  const auto n = static_cast<size_t>(rows());
  const auto c = static_cast<size_t>(config_.channels);
  const auto nh = static_cast<size_t>(config_.heads);
  const auto vp = static_cast<size_t>(config_.vp());
  for (int64_t s = 0; s < k_; ++s) {
    auto a = std::make_unique<Activations>();
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
  STRATA_ASSIGN_OR_RETURN(lnf_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(lnf_mean_, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(lnf_rstd_, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(logits_, alloc(n * vp * es));
  logits_stride_ = config_.vp();
  STRATA_ASSIGN_OR_RETURN(tmp_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(dbuf_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(dqkv_, alloc(n * 3 * c * es));
  STRATA_ASSIGN_OR_RETURN(d4b_, alloc(n * 4 * c * es));
  return ok_status();
}

GptModel::Activations& GptModel::acts(int64_t l) const {
  return *sets_[static_cast<size_t>(set_of(l))];
}

Status GptModel::init_params(uint64_t seed) {
  for (int64_t b = 0; b < num_blocks(); ++b) {
    if (param_block(b) == nullptr) continue;  // kept by the engine (init_block gives its values)
    const std::vector<float> host = init_block(config_, b, seed);
    STRATA_RETURN_IF_ERROR(upload_params(b, host.data()));
  }
  return ok_status();
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

}  // namespace strata::model
