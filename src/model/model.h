// model::Model: what the engine knows of a model (DESIGN.md §4). A model is a stack of blocks:
// layers 0..L-1 and one shared block L (embeddings, final norm, head), each one flat parameter
// vector and one flat gradient vector of the model's dtype, whose storage the engine hands in
// (BlockStorage: the blocks it leaves out live elsewhere, sharded or offloaded, and are passed to
// the entry points by pointer). A step runs through the per-block entry points on the caller's
// stream: set_batch; embedding_forward; layer_forward 0..L-1; head_forward; then head_backward;
// for segment s = last..0: (s != last: layer_recompute of its layers in ascending order),
// layer_backward of its layers in descending order; embedding_backward. forward() and backward()
// are the same step on the model's own stream, for the serial reference and evaluation.
//
// A second model family implements this interface in src/model; the engine (ZeroStep,
// SerialStep, Session) names no concrete model. GptModel (gpt.h) is the first.
//
// Ownership and threads: as each implementation states (GptModel: owns its buffers and one
// stream; one host thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "gpu/device.h"
#include "model/config.h"

namespace strata::model {

// Which blocks' parameter and gradient buffers the model allocates on the device. A ZeRO engine
// keeps the others elsewhere (sharded, gathered on demand) and passes them to the entry points.
// Empty vectors mean every block.
struct BlockStorage {
  std::vector<bool> params;  // by block (L + 1)
  std::vector<bool> grads;
  // false: the kept inputs of every checkpoint segment but the last live in the caller's
  // buffers (set_checkpoint before the entry points that touch them; the engine offloads them).
  bool checkpoints = true;
};

// Work and sizes of one block for one micro-batch of the RunShape (cost model, MFU).
struct BlockCost {
  double forward_flops = 0;      // matmuls and attention (causal half), 2 FLOPs per multiply-add
  double backward_flops = 0;     // gradients of inputs and weights (2x forward)
  int64_t param_bytes = 0;       // the block's parameters (= its gradient bytes)
  int64_t activation_bytes = 0;  // tensors a layer keeps for its backward (0 for the shared)
  int64_t checkpoint_bytes = 0;  // one kept layer input [B,T,C]
};

// Which parameters take weight decay: every one (llm.c's CPU trainer), the weight matrices (2-D
// tensors: llm.c's GPU trainer and train_gpt2.py), or all but biases and normalisation weights
// (Hugging Face's Trainer). For GPT-2 the last two are the same tensors.
enum class DecayRule { kAll, kMatrices, kNoBiasNorm };
// Elements [begin, end) of a block.
struct ElementRange {
  int64_t begin = 0, end = 0;
  bool operator==(const ElementRange&) const = default;
};

class Model;

// Cut-down copies of a model for measuring it (the calibration's compute probe): make(device,
// layers, shape) builds one with that many layers, initialised; `key` names what fixes their
// speed (dtype and sizes), for a cache of the measurements.
struct ModelProbe {
  std::function<Result<std::unique_ptr<Model>>(gpu::Device&, int64_t layers, const RunShape&)> make;
  std::string key;
};

class Model {
 public:
  virtual ~Model() = default;

  // --- What it is ---
  virtual DType dtype() const = 0;           // parameters, gradients, activations
  virtual int64_t num_layers() const = 0;    // L; block L is the shared one
  virtual int64_t vocab() const = 0;         // tokens are in [0, vocab)
  virtual std::string describe() const = 0;  // its shape in one line (checkpoints record it)
  virtual const RunShape& shape() const = 0;
  virtual gpu::Device& device() const = 0;
  virtual gpu::Stream& stream() = 0;     // the model's own (forward, backward, copies)
  virtual ModelProbe probe() const = 0;  // copies of it to measure (calibration)

  // --- Blocks ---
  int64_t num_blocks() const { return num_layers() + 1; }
  virtual int64_t block_numel(int64_t block) const = 0;
  std::vector<int64_t> block_numels() const {  // every block's, in block order
    std::vector<int64_t> n;
    for (int64_t b = 0; b < num_blocks(); ++b) n.push_back(block_numel(b));
    return n;
  }
  // The block's parameter / gradient buffer; null when BlockStorage left it out.
  virtual void* param_block(int64_t block) const = 0;
  virtual void* grad_block(int64_t block) const = 0;
  // Bytes of device memory the model holds (parameters, gradients, activations), and the part
  // that is parameter and gradient blocks.
  virtual size_t device_bytes() const = 0;
  virtual size_t param_bytes() const = 0;
  virtual size_t grad_bytes() const = 0;
  virtual BlockCost block_cost(int64_t block) const = 0;
  // The elements of the block that take weight decay under `rule` (sorted, disjoint, merged).
  virtual std::vector<ElementRange> decayed_ranges(int64_t block, DecayRule rule) const = 0;

  // --- Activation checkpoints: segment s holds layers [segment_begin(s), segment_end(s)) ---
  virtual int64_t checkpoint_interval() const = 0;
  virtual int64_t num_segments() const = 0;
  virtual int64_t segment_begin(int64_t seg) const = 0;
  virtual int64_t segment_end(int64_t seg) const = 0;
  virtual size_t checkpoint_bytes() const = 0;  // one segment's kept input
  // The kept input of segment `seg` lives at `at` from now on (the caller's segments only).
  virtual Status set_checkpoint(int64_t seg, void* at) = 0;
  virtual bool caller_checkpoint(int64_t seg) const = 0;

  // --- Micro-batch slots (the segment-major order of several micro-batches) ---
  // What one micro-batch carries from one entry point to the next (its batch and losses, the
  // kept inputs of its segments, the last layer's output, the gradient of the residual stream)
  // exists once per slot; the entry points below act on the selected slot. The activations of
  // a segment's layers and the head's logits are shared: run a slot's layers of one segment back
  // to back (forward, or recompute then backward), and its head_forward then head_backward.
  // One slot (0) by default. set_micro_slots(n) keeps slot 0's state and selects it; the
  // caller's kept inputs are set per slot (set_checkpoint acts on the selected one).
  virtual Status set_micro_slots(int count) = 0;
  virtual Status select_micro(int slot) = 0;
  virtual int micro_slots() const = 0;
  // A tied head (its matrix is the embedding's), several micro-batches a step: with this on, the
  // head's gradient of that matrix adds up over the micro-batches in a buffer of its own, and
  // fold_head_grads adds it into the embedding's gradient once, after the last micro-batch's
  // embedding backward, and zeroes it: one order of the sums that every order of the
  // micro-batches keeps. Off by default (the head adds into the block directly); nothing to do
  // for an untied head.
  virtual Status set_separate_head_grads(bool on) = 0;
  virtual Status fold_head_grads(gpu::Stream& s, void* shared_grads) = 0;

  // --- Per-block entry points (the order above), enqueued on `s` ---
  virtual Status set_batch(gpu::Stream& s, const int32_t* tokens, const int32_t* targets) = 0;
  virtual Status check_batch(const int32_t* tokens, const int32_t* targets) const = 0;
  virtual Status embedding_forward(gpu::Stream& s, const void* shared) = 0;
  virtual Status layer_forward(gpu::Stream& s, int64_t l, const void* params) = 0;
  virtual Status head_forward(gpu::Stream& s, const void* shared) = 0;
  virtual void set_loss_scale(float scale) = 0;  // fp16: the loss gradient's factor
  virtual float mean_loss() const = 0;           // of the last head_forward with targets
  virtual Status head_backward(gpu::Stream& s, const void* shared, void* shared_grads) = 0;
  virtual Status layer_recompute(gpu::Stream& s, int64_t l, const void* params) = 0;
  virtual Status layer_backward(gpu::Stream& s, int64_t l, const void* params, void* grads) = 0;
  virtual Status embedding_backward(gpu::Stream& s, void* shared_grads) = 0;

  // --- The whole model on its own stream (synchronized) ---
  virtual Status upload_params(int64_t block, const float* host) = 0;
  virtual Status download_params(int64_t block, float* host) = 0;
  virtual Status download_grads(int64_t block, float* host) = 0;
  virtual Status zero_grad() = 0;
  // The mean loss with targets (0 and the logits kept without: inference).
  virtual Result<float> forward(const int32_t* tokens, const int32_t* targets) = 0;
  virtual Status backward() = 0;
  virtual Status logits_to_host(std::vector<float>& out) = 0;
};

}  // namespace strata::model
