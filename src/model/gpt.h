// GptModel: a GPT-2-style decoder on a gpu::Device, forward and backward written per layer on
// the Device kernels (llm.c style, no autograd), with activation checkpointing.
//
// Memory: every block (layer l < L, and the shared block L: wte, wpe, lnfw, lnfb; see
// param_layout.h) has one flat parameter buffer and one flat gradient buffer of the config's
// dtype, allocated from the Device's capped pool, so the engine can shard and page layers by
// offset. Activations are sized for the RunShape given at creation. Over the device cap,
// create() returns kOutOfMemory (nothing is left allocated).
//
// Checkpointing with interval K (RunShape::checkpoint_interval): forward keeps the input of
// layers 0, K, 2K, ... and the full activations of only K layers; backward recomputes each
// segment from its kept input. Every kernel is deterministic, so gradients are bit-identical
// with and without checkpointing.
//
// Precision: parameters, gradients and activations in the config's dtype; the kernels
// accumulate in fp32 and keep layernorm statistics, attention log-sum-exp and losses in fp32.
//
// Per-layer entry points (DESIGN.md §4): the engine drives a step itself with set_batch,
// embedding_forward, layer_forward, head_forward, head_backward, layer_recompute,
// layer_backward and embedding_backward. Each takes the block's parameter (and gradient)
// pointers from the caller, so a block may live anywhere on the device (resident, gathered,
// prefetched), and enqueues its kernels on the caller's stream without synchronizing the host.
// The entry points share the model's activation buffers: the caller orders them (one stream, or
// events) as forward() and backward() below do, which are built on them and give the same bits.
// Order of a step: set_batch; embedding_forward; layer_forward 0..L-1; head_forward; then
// head_backward; for segment s = last..0: (s != last: layer_recompute of its layers in
// ascending order), layer_backward of its layers in descending order; embedding_backward.
//
// Blocks left out by BlockStorage have no buffers here: the entry points take them from the
// caller, and the whole-model calls that need them (init_params, upload/download of that block,
// forward, backward) are refused with kConfig.
//
// Ownership: the model owns its buffers and one Stream of `device`; the Device must outlive it.
// Thread safety: none; use a model from one host thread. The convenience calls (forward,
// backward, uploads, downloads) order their work on stream() and synchronize it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "cpu/pinned_memory.h"
#include "gpu/device.h"
#include "gpu/kernels.h"
#include "model/block_model.h"
#include "model/config.h"
#include "model/model.h"
#include "model/param_layout.h"

namespace strata::model {

class GptModel : public BlockModel {
 public:
  using BlockCost = model::BlockCost;
  static Result<std::unique_ptr<GptModel>> create(gpu::Device& device, const GptConfig& config,
                                                  const RunShape& shape,
                                                  const BlockStorage& storage = {});
  // Elements of block `block` (layer l < L, or the shared block L) of a model of `config`.
  static int64_t block_numel(const GptConfig& config, int64_t block);
  // Every block's elements, in block order (the engine partitions a model of `config` by them).
  static std::vector<int64_t> block_numels(const GptConfig& config);
  using Model::block_numels;  // a built model's own
  // Models of `config` cut to a few layers (initialised with seed 1); key "bf16 C=768 H=12 V=..".
  static ModelProbe probe(const GptConfig& config);
  ~GptModel() override;

  const GptConfig& config() const { return config_; }
  std::string describe() const override { return config_.describe(); }
  ModelProbe probe() const override { return probe(config_); }
  std::vector<ElementRange> decayed_ranges(int64_t block, DecayRule rule) const override;
  int64_t block_numel(int64_t block) const override;
  BlockCost block_cost(int64_t block) const override;

  // --- Per-block entry points (see the header comment for the order of a step) ---
  // Token + position embedding into layer 0's input. `shared`: the shared block's parameters.
  Status embedding_forward(gpu::Stream& s, const void* shared) override;
  // Final layernorm, logits and (with targets) the cross-entropy; the per-token losses are
  // copied to model-owned host memory, read by mean_loss() once `s` has run the copy.
  Status head_forward(gpu::Stream& s, const void* shared) override;
  // Gradients of the logits and the final layernorm into `shared_grads`; starts the residual
  // gradient. Needs a head_forward with targets.
  Status head_backward(gpu::Stream& s, const void* shared, void* shared_grads) override;
  // Token and position embedding gradients added into `shared_grads`.
  Status embedding_backward(gpu::Stream& s, void* shared_grads) override;

  // GPT-2 initialisation (init.h) of every block on the device (blocks left out by
  // BlockStorage are skipped: init_block gives their values).
  Status init_params(uint64_t seed);

 private:
  struct Activations;  // one layer's saved tensors
  GptModel(gpu::Device& device, const GptConfig& config, const RunShape& shape);
  Status allocate_family() override;
  int64_t tied_head_offset() const override { return sl_.wte; }
  int64_t tied_head_numel() const override { return config_.vp() * config_.channels; }
  Status forward_layer(gpu::Stream& s, int64_t l, const void* params, bool write_output) override;
  Status backward_layer(gpu::Stream& s, int64_t l, const void* params, void* grads) override;
  Activations& acts(int64_t l) const;

  GptConfig config_;
  LayerLayout ll_;
  SharedLayout sl_;
  std::vector<std::unique_ptr<Activations>> sets_;  // K sets of saved layer tensors
  gpu::DeviceBuffer lnf_, lnf_mean_, lnf_rstd_;
  gpu::DeviceBuffer tmp_, dbuf_, dqkv_, d4b_;
};

}  // namespace strata::model
