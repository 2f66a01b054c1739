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
#include "model/config.h"
#include "model/model.h"
#include "model/param_layout.h"

namespace strata::model {

class GptModel : public Model {
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
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptConfig& config() const { return config_; }
  DType dtype() const override { return config_.dtype; }
  int64_t num_layers() const override { return config_.layers; }
  int64_t vocab() const override { return config_.vocab; }
  std::string describe() const override { return config_.describe(); }
  const RunShape& shape() const override { return shape_; }
  gpu::Stream& stream() override { return *stream_; }
  ModelProbe probe() const override { return probe(config_); }
  std::vector<ElementRange> decayed_ranges(int64_t block, DecayRule rule) const override;
  gpu::Device& device() const override { return device_; }
  // Effective checkpoint interval (K clamped to [1, L]; L when checkpointing is off).
  int64_t checkpoint_interval() const override { return k_; }

  int64_t block_numel(int64_t block) const override;
  // The block's parameter / gradient buffer; null when BlockStorage left it out.
  void* param_block(int64_t block) const override {
    return params_[static_cast<size_t>(block)].data();
  }
  void* grad_block(int64_t block) const override {
    return grads_[static_cast<size_t>(block)].data();
  }
  // Bytes of device memory this model holds (parameters, gradients, activations), and the part
  // that is parameter and gradient blocks.
  size_t device_bytes() const override { return device_bytes_; }
  size_t param_bytes() const override { return param_bytes_; }
  size_t grad_bytes() const override { return grad_bytes_; }
  BlockCost block_cost(int64_t block) const override;

  // The kept input of segment `seg` (one [B,T,C] tensor of checkpoint_bytes()) lives at `at`
  // from now on; only for the caller's segments (BlockStorage::checkpoints false, seg below the
  // last). Touched by: the layer before the segment (writes it; embedding_forward for segment
  // 0), the segment's first layer's forward, recompute and backward (read it).
  Status set_checkpoint(int64_t seg, void* at) override;
  bool caller_checkpoint(int64_t seg) const override {
    return checkpoints_[static_cast<size_t>(seg)].data() == nullptr;
  }
  size_t checkpoint_bytes() const override;
  // Activation checkpoint segments: segment s holds layers [s*K, min((s+1)*K, L)).
  int64_t num_segments() const override { return (config_.layers + k_ - 1) / k_; }
  int64_t segment_begin(int64_t seg) const override { return seg * k_; }
  int64_t segment_end(int64_t seg) const override {
    return std::min((seg + 1) * k_, config_.layers);
  }

  // --- Per-layer entry points (see the header comment for the order of a step) ---
  // Checks tokens/targets (as forward) and enqueues their upload on `s`. targets may be null
  // (inference). The host arrays must stay valid until `s` has run the copies.
  Status set_batch(gpu::Stream& s, const int32_t* tokens, const int32_t* targets) override;
  // set_batch's checks alone (kConfig naming the position and the value).
  Status check_batch(const int32_t* tokens, const int32_t* targets) const override;
  // Token + position embedding into layer 0's input. `shared`: the shared block's parameters.
  Status embedding_forward(gpu::Stream& s, const void* shared) override;
  // Layer l's forward, keeping its activations for backward. `params`: layer l's block.
  Status layer_forward(gpu::Stream& s, int64_t l, const void* params) override;
  // Final layernorm, logits and (with targets) the cross-entropy; the per-token losses are
  // copied to model-owned host memory, read by mean_loss() once `s` has run the copy.
  Status head_forward(gpu::Stream& s, const void* shared) override;
  // fp16 loss scaling: head_forward's loss gradient is multiplied by `scale` (so are all the
  // gradients); the losses it reports are not. 1 by default.
  void set_loss_scale(float scale) override { loss_scale_ = scale; }
  float loss_scale() const { return loss_scale_; }
  // Mean loss of the last head_forward with targets (0 when none was valid, or when the last
  // set_batch had no targets).
  float mean_loss() const override;
  // Gradients of the logits and the final layernorm into `shared_grads`; starts the residual
  // gradient. Needs a head_forward with targets.
  Status head_backward(gpu::Stream& s, const void* shared, void* shared_grads) override;
  // Recomputes layer l's activations from its segment's kept input (backward of a segment that
  // is not the last one needs this, for every layer of the segment in ascending order).
  Status layer_recompute(gpu::Stream& s, int64_t l, const void* params) override;
  // Layer l's backward: parameter gradients added into `grads`, residual gradient carried on.
  Status layer_backward(gpu::Stream& s, int64_t l, const void* params, void* grads) override;
  // Token and position embedding gradients added into `shared_grads`.
  Status embedding_backward(gpu::Stream& s, void* shared_grads) override;

  // GPT-2 initialisation (init.h) of every block on the device (blocks left out by
  // BlockStorage are skipped: init_block gives their values).
  Status init_params(uint64_t seed);
  // Copies `block_numel(block)` fp32 values into the block's parameters (rounded to the dtype).
  Status upload_params(int64_t block, const float* host) override;
  // Copies a block's parameters / gradients to host fp32.
  Status download_params(int64_t block, float* host) override;
  Status download_grads(int64_t block, float* host) override;
  // Sets every gradient to zero. backward() accumulates into the gradients.
  Status zero_grad() override;

  // tokens: host int32 [B*T] in [0, V). targets: host int32 [B*T], negative = ignored, or
  // nullptr (inference: logits are kept for logits_to_host and 0 is returned). With targets,
  // returns the mean cross-entropy over the non-ignored targets (0 when there are none) and
  // prepares backward().
  Result<float> forward(const int32_t* tokens, const int32_t* targets) override;
  // Gradients of the last forward's mean loss, added into the gradient blocks.
  Status backward() override;
  // After forward(tokens, nullptr): logits as host fp32 [B*T, V] (padding columns dropped).
  Status logits_to_host(std::vector<float>& out) override;

 private:
  struct Activations;  // one layer's saved tensors
  GptModel(gpu::Device& device, const GptConfig& config, const RunShape& shape);
  Status allocate_all(const BlockStorage& storage);
  // Every block's parameters (and gradients) are allocated; kConfig naming a block otherwise.
  Status check_resident(bool grads) const;
  Result<gpu::DeviceBuffer> alloc(size_t bytes);
  // The input residual [B,T,C] of layer l (a checkpoint, or a per-set buffer).
  void* layer_input(int64_t l) const;
  void* layer_output(int64_t l) const;
  Activations& acts(int64_t l) const;
  Status check_layer(int64_t l) const;
  Status forward_layer(gpu::Stream& s, int64_t l, const void* params, bool write_output);
  Status copy_block(int64_t block, const gpu::DeviceBuffer& buf, float* host);

  gpu::Device& device_;
  gpu::Kernels& k_ops_;
  GptConfig config_;
  RunShape shape_;
  int64_t k_ = 1;  // effective checkpoint interval
  std::unique_ptr<gpu::Stream> stream_;
  LayerLayout ll_;
  SharedLayout sl_;
  size_t device_bytes_ = 0, param_bytes_ = 0, grad_bytes_ = 0;

  std::vector<gpu::DeviceBuffer> params_, grads_;   // L + 1 blocks each
  std::vector<gpu::DeviceBuffer> checkpoints_;      // ceil(L / K) kept layer inputs [B,T,C]
  std::vector<void*> checkpoint_at_;                // where each is (the model's or the caller's)
  std::vector<std::unique_ptr<Activations>> sets_;  // K sets of saved layer tensors
  gpu::DeviceBuffer x_final_, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, tokens_, targets_;
  gpu::DeviceBuffer tmp_, dres_, dbuf_, dqkv_, d4a_, d4b_;
  int64_t resident_segment_ = -1;  // segment whose layers' activations are in sets_
  bool have_targets_ = false;
  int64_t valid_targets_ = 0;  // non-ignored targets of the last set_batch
  bool losses_ready_ = false;  // head_forward with targets ran since the last set_batch
  float loss_scale_ = 1.0f;
  // Pinned host memory for the enqueued copies (device.h: pageable memory would be staged and
  // block on a GPU): the per-position losses read back, and the batch's tokens | targets, whose
  // copies must have read them (batch_copied_) before the next batch overwrites them.
  cpu::PinnedBuffer host_losses_, host_batch_;
  std::unique_ptr<gpu::Event> batch_copied_;  // (never recorded: complete)
};

}  // namespace strata::model
