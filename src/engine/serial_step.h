// SerialStep: the reference offloaded step, one phase after the other on the model's stream:
// zero the gradients, forward, backward, download every block's gradient as fp32, the global
// norm and the non-finite check on the host (cpu::grad_check, blocks in order), the whole
// OffloadedOptimizer::step (clip coefficient over the loss scale as the gradient scale), then
// every block's new parameters up (16-bit copies the optimizer wrote, or the fp32 masters for an
// fp32 model). fp16: the loss is scaled (StepScaling); an overflow skips the update.
//
// Ownership: borrows the model and the optimizer (partitions as partition_blocks()), which must
// outlive it; owns host staging. Thread safety: none.
#pragma once

#include <memory>
#include <vector>

#include "cpu/pinned_memory.h"
#include "engine/offload_step.h"
#include "engine/offloaded_optimizer.h"
#include "engine/train_step.h"

namespace strata::engine {

class SerialStep : public TrainStep {
 public:
  static Result<std::unique_ptr<SerialStep>> create(model::Model& model,
                                                    OffloadedOptimizer& optimizer,
                                                    const OffloadStepOptions& options);
  // One training step on micro_batches micro-batches (tokens/targets: host int32
  // [micro_batches*B*T]): forward and backward of each, the gradients adding up in the model's
  // blocks, then one update with their mean; `step` from 1.
  Result<StepResult> run(const int32_t* tokens, const int32_t* targets, int64_t step,
                         int micro_batches = 1) override;
  // Nothing is ever pending: each run() applies its own update.
  Status flush() override { return ok_status(); }
  // The learning rate of the next run()'s update (applied within that run).
  void set_lr(float lr) override { opt_.adam().set_lr(lr); }
  StepScaling::State scaling_state() const override { return scaling_.state(); }
  void restore_scaling(const StepScaling::State& s) override { scaling_.restore(s); }
  // The model holds every block: its own forward, its own blocks.
  Status forward_inference(const int32_t* tokens, const int32_t* targets) override {
    return model_.forward(tokens, targets).status();
  }
  Status gather_params(int64_t block, float* host) override {
    return model_.download_params(block, host);
  }

 private:
  SerialStep(model::Model& model, OffloadedOptimizer& optimizer, const OffloadStepOptions& options)
      : model_(model), opt_(optimizer), options_(options) {}

  model::Model& model_;
  OffloadedOptimizer& opt_;
  OffloadStepOptions options_;
  StepScaling scaling_;
  std::vector<int64_t> blocks_;             // partition -> block
  std::vector<std::vector<float>> grads_;   // by block, fp32
  std::vector<std::vector<float>> master_;  // by block (fp32 models: the upload)
  std::vector<cpu::PinnedBuffer> out16_;    // by partition (16-bit models)
  std::vector<PartitionGrad> pg_;           // by partition
};

}  // namespace strata::engine
