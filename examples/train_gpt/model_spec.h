// The model a run trains, of either family: a GPT-2 shape (llm.c's files, model/gpt.h) or a
// Llama shape (Hugging Face's checkpoints, model/llama.h). What the trainer asks of the model
// before it exists (sizes, blocks, the initialisation, the calibration probe, the FLOPs) goes
// through here, so the rest of the trainer names no family. Values; thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "gpu/device.h"
#include "model/config.h"
#include "model/llama_config.h"
#include "model/model.h"

namespace strata::train_gpt {

struct ModelSpec {
  bool llama = false;
  model::GptConfig gpt;     // the GPT shape (llama false)
  model::LlamaConfig lcfg;  // the Llama shape (llama true)

  DType dtype() const { return llama ? lcfg.dtype : gpt.dtype; }
  void set_dtype(DType t) { (llama ? lcfg.dtype : gpt.dtype) = t; }
  int64_t vocab() const { return llama ? lcfg.vocab : gpt.vocab; }
  int64_t layers() const { return llama ? lcfg.layers : gpt.layers; }
  int64_t channels() const { return llama ? lcfg.channels : gpt.channels; }
  int64_t heads() const { return llama ? lcfg.heads : gpt.heads; }
  int64_t max_seq() const { return llama ? lcfg.max_seq : gpt.max_seq; }
  // T on token data without --seq-len: GPT's context; a Llama's up to 1024 (Llama 3's is 131072).
  int64_t default_seq() const {
    return llama ? std::min<int64_t>(lcfg.max_seq, 1024) : gpt.max_seq;
  }
  int64_t num_params() const { return llama ? lcfg.num_params() : gpt.num_params(); }
  std::string describe() const { return llama ? lcfg.describe() : gpt.describe(); }
  Status validate() const { return llama ? lcfg.validate() : gpt.validate(); }
  int64_t block_numel(int64_t block) const;
  std::vector<int64_t> block_numels() const;
  model::ModelProbe probe() const;
  // The family's initialisation of block b (GPT-2's init.h, or Hugging Face's for Llama).
  std::vector<float> init_block(int64_t block, uint64_t seed) const;
  // The model on `dev`, holding the blocks `storage` names; initialised with `seed` unless
  // `init` is false.
  Result<std::unique_ptr<model::Model>> create(gpu::Device& dev, const model::RunShape& shape,
                                               const model::BlockStorage& storage, bool init,
                                               uint64_t seed) const;
};

}  // namespace strata::train_gpt
