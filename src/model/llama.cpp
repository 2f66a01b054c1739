#include "model/llama.h"

// core/rng.h uses unsigned __int128, which -Wpedantic rejects.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include "core/rng.h"
#pragma GCC diagnostic pop
#include "model/llama_internal.h"
#include "model/llama_layout.h"

namespace strata::model {

LlamaModel::LlamaModel(gpu::Device& device, const LlamaConfig& config, const RunShape& shape)
    : BlockModel(device, shape, config.dtype, config.layers, config.vocab, config.channels,
                 "LlamaModel"),
      config_(config) {
  width_ = (config.heads + 2 * config.kv_heads) * config.head_size();
  const std::vector<LlamaTensor> layer = llama_block_tensors(config, 0);
  in_norm_ = layer[0].offset;
  qkv_w_ = layer[1].offset;  // q, then k and v right after it: one [width, C] matrix
  o_w_ = layer[4].offset;
  post_norm_ = layer[5].offset;
  gate_up_w_ = layer[6].offset;  // gate, then up: one [2I, C] matrix
  down_w_ = layer[8].offset;
  const std::vector<LlamaTensor> shared = llama_block_tensors(config, config.layers);
  embed_ = shared[0].offset;
  norm_ = shared[1].offset;
  head_ = config.tied ? embed_ : shared[2].offset;
}

LlamaModel::~LlamaModel() {
  if (stream_) (void)stream_->synchronize();  // before the activations go
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::create(gpu::Device& device,
                                                       const LlamaConfig& config,
                                                       const RunShape& shape,
                                                       const BlockStorage& storage) {
  STRATA_RETURN_IF_ERROR(config.validate());
  STRATA_RETURN_IF_ERROR(shape.validate(config.max_seq));
  std::unique_ptr<LlamaModel> model(new LlamaModel(device, config, shape));
  STRATA_RETURN_IF_ERROR(
      model->allocate(storage).with_context("allocating Llama (" + config.describe() + ", " +
                                            std::to_string(config.num_params()) + " params)"));
  return model;
}

std::vector<int64_t> LlamaModel::block_numels(const LlamaConfig& config) {
  std::vector<int64_t> numel;
  for (int64_t b = 0; b <= config.layers; ++b) numel.push_back(llama_block_numel(config, b));
  return numel;
}

int64_t LlamaModel::block_numel(int64_t block) const { return llama_block_numel(config_, block); }

ModelProbe LlamaModel::probe(const LlamaConfig& config) {
  ModelProbe p;
  p.make = [config](gpu::Device& device, int64_t layers,
                    const RunShape& shape) -> Result<std::unique_ptr<Model>> {
    LlamaConfig c = config;
    c.layers = layers;
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> m, create(device, c, shape));
    STRATA_RETURN_IF_ERROR(m->init_params(1));
    return std::unique_ptr<Model>(std::move(m));
  };
  p.key = "llama " + std::string(dtype_name(config.dtype)) +
          " C=" + std::to_string(config.channels) + " H=" + std::to_string(config.heads) +
          " KV=" + std::to_string(config.kv_heads) + " I=" + std::to_string(config.intermediate) +
          " V=" + std::to_string(config.vocab) + (config.tied ? " tied" : "");
  return p;
}

Status LlamaModel::allocate_family() {
  const size_t es = dtype_size(config_.dtype);
  const auto n = static_cast<size_t>(rows());
  const auto c = static_cast<size_t>(config_.channels);
  const auto w = static_cast<size_t>(width_);
  const auto inter = static_cast<size_t>(config_.intermediate);
  const auto nh = static_cast<size_t>(config_.heads);
  for (int64_t s = 0; s < k_; ++s) {
    auto a = std::make_unique<Activations>();
    STRATA_ASSIGN_OR_RETURN(a->ln1, alloc(n * c * es));
    STRATA_ASSIGN_OR_RETURN(a->rstd1, alloc(n * 4));
    STRATA_ASSIGN_OR_RETURN(a->qkv, alloc(n * w * es));
    STRATA_ASSIGN_OR_RETURN(a->atty, alloc(n * c * es));
    STRATA_ASSIGN_OR_RETURN(a->lse, alloc(n * nh * 4));
    STRATA_ASSIGN_OR_RETURN(a->res2, alloc(n * c * es));
    STRATA_ASSIGN_OR_RETURN(a->ln2, alloc(n * c * es));
    STRATA_ASSIGN_OR_RETURN(a->rstd2, alloc(n * 4));
    STRATA_ASSIGN_OR_RETURN(a->gate_up, alloc(n * 2 * inter * es));
    STRATA_ASSIGN_OR_RETURN(a->h, alloc(n * inter * es));
    sets_.push_back(std::move(a));
  }
  const std::vector<float> freq = config_.inv_freq();
  STRATA_ASSIGN_OR_RETURN(inv_freq_, alloc(freq.size() * 4));
  STRATA_RETURN_IF_ERROR(stream_->copy_now(inv_freq_.data(), freq.data(), freq.size() * 4,
                                           gpu::CopyKind::kHostToDevice));
  const auto tc = static_cast<size_t>(shape_.seq) * c * es;
  STRATA_ASSIGN_OR_RETURN(zero_pos_, alloc(tc));
  STRATA_RETURN_IF_ERROR(stream_->memset(zero_pos_.data(), 0, tc));
  STRATA_ASSIGN_OR_RETURN(dpos_, alloc(tc));
  STRATA_ASSIGN_OR_RETURN(lnf_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(lnf_rstd_, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(logits_, alloc(n * static_cast<size_t>(config_.vocab) * es));
  logits_stride_ = config_.vocab;
  STRATA_ASSIGN_OR_RETURN(tmp_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(dbuf_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(dqkv_, alloc(n * w * es));
  STRATA_ASSIGN_OR_RETURN(dh_, alloc(n * inter * es));
  STRATA_ASSIGN_OR_RETURN(dgu_, alloc(n * 2 * inter * es));
  return stream_->synchronize();
}

LlamaModel::Activations& LlamaModel::acts(int64_t l) const {
  return *sets_[static_cast<size_t>(set_of(l))];
}

const void* LlamaModel::head_weight(const void* shared) const {
  return elem(const_cast<void*>(shared), head_, config_.dtype);
}

std::vector<ElementRange> LlamaModel::decayed_ranges(int64_t block, DecayRule rule) const {
  std::vector<ElementRange> out;
  for (const LlamaTensor& t : llama_block_tensors(config_, block)) {
    // Both rules leave out the RMSNorm weights, the only 1-D tensors (Llama has no biases).
    if (rule != DecayRule::kAll && t.norm) continue;
    const ElementRange r{t.offset, t.offset + t.numel()};
    if (!out.empty() && out.back().end == r.begin) {
      out.back().end = r.end;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

BlockCost LlamaModel::block_cost(int64_t block) const {
  const auto es = static_cast<int64_t>(dtype_size(config_.dtype));
  const auto n = static_cast<double>(rows());
  const auto c = static_cast<double>(config_.channels);
  BlockCost cost;
  cost.param_bytes = block_numel(block) * es;
  cost.checkpoint_bytes = rows() * config_.channels * es;
  if (block == config_.layers) {
    cost.forward_flops = 2.0 * n * static_cast<double>(config_.vocab) * c;  // the logits
  } else {
    // qkv C*width, o C^2, gate|up 2CI, down CI per row; attention QK^T and AV over the causal
    // half: 2 * (2 * T * C / 2) per row.
    const auto inter = static_cast<double>(config_.intermediate);
    cost.forward_flops = 2.0 * n * (c * static_cast<double>(width_) + c * c + 3.0 * c * inter) +
                         2.0 * n * static_cast<double>(shape_.seq) * c;
    // ln1, qkv, atty, res2, ln2, gate|up, h in the dtype; two rstd rows and the lse in fp32.
    cost.activation_bytes =
        rows() * (4 * config_.channels + width_ + 3 * config_.intermediate) * es + rows() * 2 * 4 +
        rows() * config_.heads * 4;
  }
  cost.backward_flops = 2.0 * cost.forward_flops;
  return cost;
}

std::vector<float> init_llama_block(const LlamaConfig& config, int64_t block, uint64_t seed) {
  std::vector<float> out(static_cast<size_t>(llama_block_numel(config, block)), 0.0f);
  uint64_t index = 0;
  for (const LlamaTensor& t : llama_block_tensors(config, block)) {
    float* p = out.data() + t.offset;
    const int64_t numel = t.numel();
    const CounterRng rng(seed, static_cast<uint64_t>(block) * 16 + index++);
    for (int64_t i = 0; i < numel; ++i) {
      p[i] = t.norm ? 1.0f : static_cast<float>(0.02 * rng.normal(static_cast<uint64_t>(i)));
    }
  }
  return out;
}

Status LlamaModel::init_params(uint64_t seed) {
  for (int64_t b = 0; b < num_blocks(); ++b) {
    if (param_block(b) == nullptr) continue;  // kept by the engine
    const std::vector<float> host = init_llama_block(config_, b, seed);
    STRATA_RETURN_IF_ERROR(upload_params(b, host.data()));
  }
  return ok_status();
}

}  // namespace strata::model
