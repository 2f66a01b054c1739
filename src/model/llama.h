// LlamaModel: a Llama-family decoder (Hugging Face's LlamaForCausalLM, llama_config.h) on a
// gpu::Device, the second implementation of model::Model: forward and backward written per
// layer on the Device kernels, with activation checkpointing (BlockModel holds what it shares
// with GptModel: blocks, kept inputs, the batch, the losses, the whole-model calls).
//
// A layer: h = x + o_proj(attention(rope(q), rope(k), v)) with q | k | v = qkv_proj(rmsnorm(x))
// (one fused matmul, grouped-query attention), out = h + down_proj(silu(gate) * up) with
// gate | up = gate_up_proj(rmsnorm(h)). The head: rmsnorm, then lm_head (or the embedding when
// tied), softmax cross-entropy. No biases, no position table. Blocks as llama_layout.h lays them
// out (Hugging Face's tensors, so checkpoints move a tensor as it is).
//
// Precision: parameters, gradients and activations in the config's dtype; the kernels accumulate
// in fp32 and keep RMSNorm statistics, the attention log-sum-exp and the losses in fp32. Where
// strata differs from Hugging Face in 16-bit: each kernel rounds its result once (Hugging Face
// also rounds inside RMSNorm, after x * rsqrt, and rounds cos/sin to the dtype before the
// rotation); in fp32 the two agree to rounding.
//
// Ownership and threads: as BlockModel.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/block_model.h"
#include "model/llama_config.h"

namespace strata::model {

class LlamaModel : public BlockModel {
 public:
  static Result<std::unique_ptr<LlamaModel>> create(gpu::Device& device, const LlamaConfig& config,
                                                    const RunShape& shape,
                                                    const BlockStorage& storage = {});
  // Every block's elements, in block order.
  static std::vector<int64_t> block_numels(const LlamaConfig& config);
  using Model::block_numels;
  // Models of `config` cut to a few layers (initialised with seed 1).
  static ModelProbe probe(const LlamaConfig& config);
  ~LlamaModel() override;

  const LlamaConfig& config() const { return config_; }
  std::string describe() const override { return config_.describe(); }
  ModelProbe probe() const override { return probe(config_); }
  std::vector<ElementRange> decayed_ranges(int64_t block, DecayRule rule) const override;
  int64_t block_numel(int64_t block) const override;
  BlockCost block_cost(int64_t block) const override;

  // Token embedding into layer 0's input.
  Status embedding_forward(gpu::Stream& s, const void* shared) override;
  // Final RMSNorm, logits and (with targets) the cross-entropy.
  Status head_forward(gpu::Stream& s, const void* shared) override;
  // Gradients of the head (lm_head, or the embedding when tied) and the final norm; starts the
  // residual gradient.
  Status head_backward(gpu::Stream& s, const void* shared, void* shared_grads) override;
  // The embedding's gradient added into `shared_grads`.
  Status embedding_backward(gpu::Stream& s, void* shared_grads) override;

  // Hugging Face's initialisation: every weight normal(0, 0.02) (initializer_range), RMSNorm
  // weights 1; each tensor from its own counter-based stream. Blocks left out by BlockStorage are
  // skipped (init_llama_block gives their values).
  Status init_params(uint64_t seed);

 private:
  struct Activations;
  LlamaModel(gpu::Device& device, const LlamaConfig& config, const RunShape& shape);
  Status allocate_family() override;
  int64_t tied_head_offset() const override { return embed_; }
  int64_t tied_head_numel() const override {
    return config_.tied ? config_.vocab * config_.channels : 0;
  }
  Status forward_layer(gpu::Stream& s, int64_t l, const void* params, bool write_output) override;
  Status backward_layer(gpu::Stream& s, int64_t l, const void* params, void* grads) override;
  Activations& acts(int64_t l) const;
  const void* head_weight(const void* shared) const;

  LlamaConfig config_;
  int64_t width_ = 0;  // a q | k | v row: (NH + 2 NKV) * HS
  // Offsets in a layer block (llama_layout.h) and in the shared block.
  int64_t in_norm_ = 0, qkv_w_ = 0, o_w_ = 0, post_norm_ = 0, gate_up_w_ = 0, down_w_ = 0;
  int64_t embed_ = 0, norm_ = 0, head_ = 0;
  std::vector<std::unique_ptr<Activations>> sets_;
  gpu::DeviceBuffer inv_freq_;         // fp32 [HS/2]
  gpu::DeviceBuffer zero_pos_, dpos_;  // [T, C]: the embedding kernel's (absent) position table
  gpu::DeviceBuffer lnf_, lnf_rstd_;   // final norm [B*T, C], fp32 [B*T]
  gpu::DeviceBuffer tmp_, dbuf_;       // [B*T, C]
  gpu::DeviceBuffer dqkv_, dh_, dgu_;  // [B*T, width], [B*T, I], [B*T, 2I]
};

// Hugging Face's initialisation of block `block` (LlamaModel::init_params), fp32 on the host.
std::vector<float> init_llama_block(const LlamaConfig& config, int64_t block, uint64_t seed);

}  // namespace strata::model
