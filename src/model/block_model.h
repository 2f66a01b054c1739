// BlockModel: what every decoder family shares under model::Model (GptModel, LlamaModel): the
// parameter and gradient blocks (and BlockStorage), activation checkpoint segments and their kept
// inputs, the per-set layer inputs, the batch upload, the losses read back, the whole-model
// forward and backward built on the per-block entry points, and block uploads and downloads.
// A family supplies its block sizes, its saved activations (one set per layer of a segment), the
// layer's forward and backward, the embedding and the head.
//
// Memory: every block has one flat parameter buffer and one flat gradient buffer of the model's
// dtype from the Device's capped pool; over the cap, creation fails with kOutOfMemory.
// Checkpointing with interval K: the input of layers 0, K, 2K, ... is kept, activations of only K
// layers; backward recomputes each segment from its kept input (deterministic kernels: the same
// bits with and without checkpointing).
//
// Ownership: the model owns its buffers and one Stream of `device`; the Device must outlive it.
// Thread safety: none; use a model from one host thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "cpu/pinned_memory.h"
#include "gpu/device.h"
#include "gpu/kernels.h"
#include "model/config.h"
#include "model/model.h"

namespace strata::model {

// Element `offset` of a buffer of `dtype`.
inline void* elem(void* base, int64_t offset, DType dtype) {
  return static_cast<char*>(base) + offset * static_cast<int64_t>(dtype_size(dtype));
}

class BlockModel : public Model {
 public:
  ~BlockModel() override;
  BlockModel(const BlockModel&) = delete;
  BlockModel& operator=(const BlockModel&) = delete;

  DType dtype() const override { return dtype_; }
  int64_t num_layers() const override { return layers_; }
  int64_t vocab() const override { return vocab_; }
  const RunShape& shape() const override { return shape_; }
  gpu::Stream& stream() override { return *stream_; }
  gpu::Device& device() const override { return device_; }
  int64_t checkpoint_interval() const override { return k_; }

  void* param_block(int64_t block) const override {
    return params_[static_cast<size_t>(block)].data();
  }
  void* grad_block(int64_t block) const override {
    return grads_[static_cast<size_t>(block)].data();
  }
  size_t device_bytes() const override { return device_bytes_; }
  size_t param_bytes() const override { return param_bytes_; }
  size_t grad_bytes() const override { return grad_bytes_; }

  // The kept input of segment `seg` (one [B,T,C] tensor of checkpoint_bytes()) lives at `at`
  // from now on; only for the caller's segments (BlockStorage::checkpoints false, seg below the
  // last). Touched by: the layer before the segment (writes it; embedding_forward for segment
  // 0), the segment's first layer's forward, recompute and backward (read it).
  Status set_checkpoint(int64_t seg, void* at) override;
  bool caller_checkpoint(int64_t seg) const override {
    return checkpoints_[static_cast<size_t>(seg)].data() == nullptr;
  }
  size_t checkpoint_bytes() const override;
  // Segment s holds layers [s*K, min((s+1)*K, L)).
  int64_t num_segments() const override { return (layers_ + k_ - 1) / k_; }
  int64_t segment_begin(int64_t seg) const override { return seg * k_; }
  int64_t segment_end(int64_t seg) const override { return std::min((seg + 1) * k_, layers_); }

  // Checks tokens/targets (as forward) and enqueues their upload on `s`. targets may be null
  // (inference). The host arrays must stay valid until `s` has run the copies.
  Status set_batch(gpu::Stream& s, const int32_t* tokens, const int32_t* targets) override;
  // set_batch's checks alone (kConfig naming the position and the value).
  Status check_batch(const int32_t* tokens, const int32_t* targets) const override;
  // Layer l's forward, keeping its activations for backward. `params`: layer l's block.
  Status layer_forward(gpu::Stream& s, int64_t l, const void* params) override;
  // Recomputes layer l's activations from its segment's kept input (backward of a segment that
  // is not the last one needs this, for every layer of the segment in ascending order).
  Status layer_recompute(gpu::Stream& s, int64_t l, const void* params) override;
  // Layer l's backward: parameter gradients added into `grads`, residual gradient carried on.
  Status layer_backward(gpu::Stream& s, int64_t l, const void* params, void* grads) override;
  // fp16 loss scaling: the loss gradient is multiplied by `scale` (so are all the gradients);
  // the losses reported are not. 1 by default.
  void set_loss_scale(float scale) override { loss_scale_ = scale; }
  float loss_scale() const { return loss_scale_; }
  // Mean loss of the last head_forward with targets (0 when none was valid, or when the last
  // set_batch had no targets).
  float mean_loss() const override;

  // Micro-batch slots (model.h). A slot beyond the first holds its batch, losses, last-layer
  // output and residual gradient (about 2 [B,T,C] tensors and 12 bytes a position), and the
  // kept inputs the model holds (BlockStorage::checkpoints: every segment's, else the last's).
  Status set_micro_slots(int count) override;
  Status select_micro(int slot) override;
  int micro_slots() const override { return std::max<int>(1, static_cast<int>(parked_.size())); }
  // The tied head's gradient apart (model.h): a buffer of the tied matrix's size while on.
  Status set_separate_head_grads(bool on) override;
  Status fold_head_grads(gpu::Stream& s, void* shared_grads) override;

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

 protected:
  // `channels`: the residual stream's width (checkpoint tensors are [B,T,C]).
  BlockModel(gpu::Device& device, const RunShape& shape, DType dtype, int64_t layers, int64_t vocab,
             int64_t channels, std::string name);
  // Allocates blocks, kept inputs, layer inputs, the batch and the losses, then the family's
  // buffers (allocate_family); context names the model in errors.
  Status allocate(const BlockStorage& storage);
  Result<gpu::DeviceBuffer> alloc(size_t bytes);
  // The family's saved activations (K sets, one per layer of a segment), head and scratch.
  virtual Status allocate_family() = 0;
  // The tied head's matrix in the shared block: its offset and elements (0: the head is untied).
  virtual int64_t tied_head_offset() const = 0;
  virtual int64_t tied_head_numel() const = 0;
  // Where the head's backward adds the tied matrix's gradient: the shared block's gradient at the
  // matrix, or the buffer of its own (set_separate_head_grads).
  void* tied_head_grad(void* shared_grads) const;
  // Layer l's forward from layer_input(l) into layer_output(l) (unless !write_output: the
  // output is already kept).
  virtual Status forward_layer(gpu::Stream& s, int64_t l, const void* params,
                               bool write_output) = 0;
  // Layer l's backward (the activations are resident).
  virtual Status backward_layer(gpu::Stream& s, int64_t l, const void* params, void* grads) = 0;

  // The input residual [B,T,C] of layer l (a kept input, or a per-set buffer) and its output.
  void* layer_input(int64_t l) const;
  void* layer_output(int64_t l) const;
  int64_t set_of(int64_t l) const { return l % k_; }  // which activation set layer l uses
  Status check_layer(int64_t l) const;
  int64_t rows() const { return shape_.batch * shape_.seq; }
  // The losses' copy back and their count, for head_forward: true when targets were set.
  bool have_targets() const { return have_targets_; }
  // The loss gradient's factor: loss_scale / valid targets (0 without valid targets).
  float dloss() const;
  // Marks the losses ready and enqueues their copy back (head_forward with targets).
  Status copy_losses(gpu::Stream& s);
  // The linear layers over the B*T rows, in the model's dtype (weights [out, in]):
  // y[n,out] = x[n,in] . w^T (+ bias); dW[out,in] += dY^T . X; dX[n,in] = dY . W; with a GELU
  // epilogue (kernels.h) y = gelu(x . w^T + bias) keeping the pre-activation in aux, and
  // dX = gelu'(aux) * (dY . W).
  Status linear(gpu::Stream& s, void* y, const void* x, const void* w, const void* bias,
                int64_t out, int64_t in, gpu::Epilogue epilogue = gpu::Epilogue::kNone,
                void* aux = nullptr);
  Status weight_grad(gpu::Stream& s, void* dw, const void* dy, const void* x, int64_t out,
                     int64_t in);
  Status input_grad(gpu::Stream& s, void* dx, const void* dy, const void* w, int64_t out,
                    int64_t in, gpu::Epilogue epilogue = gpu::Epilogue::kNone,
                    const void* aux = nullptr);

  gpu::Device& device_;
  gpu::Kernels& k_ops_;
  RunShape shape_;
  DType dtype_;
  int64_t layers_, vocab_, channels_;
  int64_t k_ = 1;  // effective checkpoint interval
  std::string name_;
  std::unique_ptr<gpu::Stream> stream_;
  size_t device_bytes_ = 0, param_bytes_ = 0, grad_bytes_ = 0;
  std::vector<gpu::DeviceBuffer> params_, grads_;  // L + 1 blocks each
  std::vector<gpu::DeviceBuffer> checkpoints_;     // ceil(L / K) kept layer inputs [B,T,C]
  std::vector<void*> checkpoint_at_;               // where each is (the model's or the caller's)
  std::vector<gpu::DeviceBuffer> x_in_;            // K per-set layer inputs (set 0: unused)
  gpu::DeviceBuffer x_final_;                      // the last layer's output [B,T,C]
  gpu::DeviceBuffer dres_;  // the gradient of the residual stream [B,T,C] between layers
  gpu::DeviceBuffer tokens_, targets_, losses_;
  // Logits [B*T, logits_stride_] (the head writes them; logits_to_host reads V of each row).
  gpu::DeviceBuffer logits_;
  int64_t logits_stride_ = 0;
  int64_t resident_segment_ = -1;  // segment whose layers' activations are in the sets
  int resident_slot_ = 0;          // and the micro-batch slot they are of

 private:
  // One micro-batch slot's state: the selected slot's is in the members, the others' here.
  struct MicroState {
    gpu::DeviceBuffer tokens, targets, losses, x_final, dres;
    std::vector<gpu::DeviceBuffer> checkpoints;  // the model's kept inputs (empty: the caller's)
    std::vector<void*> checkpoint_at;
    cpu::PinnedBuffer host_losses, host_batch;
    std::unique_ptr<gpu::Event> batch_copied;
    bool have_targets = false, losses_ready = false;
    int64_t valid_targets = 0;
    size_t device_bytes() const;
  };
  Result<MicroState> new_micro_state();
  void exchange(MicroState& m);  // the members' state <-> m's
  Status check_resident(bool grads) const;
  Status copy_block(int64_t block, const gpu::DeviceBuffer& buf, float* host);

  std::vector<MicroState> parked_;  // by slot (empty: one slot); the selected one's is empty
  int slot_ = 0;
  gpu::DeviceBuffer head_grads_;  // the tied head's gradient apart (empty: off)

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
