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
// Ownership: the model owns its buffers and one Stream of `device`; the Device must outlive it.
// Thread safety: none; use a model from one host thread. All work is ordered on stream(); calls
// that return host values (forward's loss, downloads) synchronize it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "gpu/device.h"
#include "gpu/kernels.h"
#include "model/config.h"
#include "model/param_layout.h"

namespace strata::model {

class GptModel {
 public:
  static Result<std::unique_ptr<GptModel>> create(gpu::Device& device, const GptConfig& config,
                                                  const RunShape& shape);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptConfig& config() const { return config_; }
  const RunShape& shape() const { return shape_; }
  gpu::Stream& stream() { return *stream_; }
  // Effective checkpoint interval (K clamped to [1, L]; L when checkpointing is off).
  int64_t checkpoint_interval() const { return k_; }

  int64_t num_blocks() const { return config_.layers + 1; }
  int64_t block_numel(int64_t block) const;
  void* param_block(int64_t block) const { return params_[static_cast<size_t>(block)].data(); }
  void* grad_block(int64_t block) const { return grads_[static_cast<size_t>(block)].data(); }
  // Bytes of device memory this model holds (parameters, gradients, activations).
  size_t device_bytes() const { return device_bytes_; }

  // GPT-2 initialisation (init.h) of every block.
  Status init_params(uint64_t seed);
  // Copies `block_numel(block)` fp32 values into the block's parameters (rounded to the dtype).
  Status upload_params(int64_t block, const float* host);
  // Copies a block's parameters / gradients to host fp32.
  Status download_params(int64_t block, float* host);
  Status download_grads(int64_t block, float* host);
  // Sets every gradient to zero. backward() accumulates into the gradients.
  Status zero_grad();

  // tokens: host int32 [B*T] in [0, V). targets: host int32 [B*T], negative = ignored, or
  // nullptr (inference: logits are kept for logits_to_host and 0 is returned). With targets,
  // returns the mean cross-entropy over the non-ignored targets (0 when there are none) and
  // prepares backward().
  Result<float> forward(const int32_t* tokens, const int32_t* targets);
  // Gradients of the last forward's mean loss, added into the gradient blocks.
  Status backward();
  // After forward(tokens, nullptr): logits as host fp32 [B*T, V] (padding columns dropped).
  Status logits_to_host(std::vector<float>& out);

 private:
  struct Activations;  // one layer's saved tensors
  GptModel(gpu::Device& device, const GptConfig& config, const RunShape& shape);
  Status allocate_all();
  Result<gpu::DeviceBuffer> alloc(size_t bytes);
  // The input residual [B,T,C] of layer l (a checkpoint, or a per-set buffer).
  void* layer_input(int64_t l) const;
  void* layer_output(int64_t l) const;
  Activations& acts(int64_t l) const;
  Status layer_forward(int64_t l, bool write_output);
  Status layer_backward(int64_t l);
  Status head_forward(const int32_t* targets_host, float* loss);
  Status head_backward();
  Status copy_block(int64_t block, const gpu::DeviceBuffer& buf, float* host);

  gpu::Device& device_;
  gpu::Kernels& k_ops_;
  GptConfig config_;
  RunShape shape_;
  int64_t k_ = 1;  // effective checkpoint interval
  std::unique_ptr<gpu::Stream> stream_;
  LayerLayout ll_;
  SharedLayout sl_;
  size_t device_bytes_ = 0;

  std::vector<gpu::DeviceBuffer> params_, grads_;   // L + 1 blocks each
  std::vector<gpu::DeviceBuffer> checkpoints_;      // ceil(L / K) kept layer inputs [B,T,C]
  std::vector<std::unique_ptr<Activations>> sets_;  // K sets of saved layer tensors
  gpu::DeviceBuffer x_final_, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, tokens_, targets_;
  gpu::DeviceBuffer tmp_, dres_, dbuf_, dqkv_, d4a_, d4b_;
  int64_t resident_segment_ = -1;  // segment whose layers' activations are in sets_
  bool have_targets_ = false;
  std::vector<float> host_losses_;
};

}  // namespace strata::model
