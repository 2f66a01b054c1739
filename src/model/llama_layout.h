// Where a Llama model's parameters lie in strata's blocks, and Hugging Face checkpoints of them.
//
// Layer block l (< L), in this order: input_layernorm [C] | q_proj [NH*HS, C] | k_proj
// [NKV*HS, C] | v_proj [NKV*HS, C] | o_proj [C, C] | post_attention_layernorm [C] | gate_proj
// [I, C] | up_proj [I, C] | down_proj [C, I]. q, k and v are one [(NH + 2 NKV) HS, C] matrix (one
// matmul gives a q | k | v row), gate and up one [2I, C] (a gate | up row). The shared block L:
// embed_tokens [V, C] | norm [C] | lm_head [V, C] (untied only; tied, the head is embed_tokens).
// Weights are nn.Linear's [out, in], as Hugging Face stores them, so a tensor moves as it is.
//
// Checkpoints: Hugging Face's names (model.embed_tokens.weight, model.layers.N.self_attn.
// {q,k,v,o}_proj.weight, model.layers.N.mlp.{gate,up,down}_proj.weight,
// model.layers.N.{input,post_attention}_layernorm.weight, model.norm.weight, lm_head.weight),
// read a block at a time from a safetensors checkpoint directory (one file or shards) and written
// the same way, with config.json. Free functions; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/llama_config.h"
#include "model/model.h"
#include "model/model_file.h"
#include "model/safetensors.h"

namespace strata::model {

struct LlamaTensor {
  std::string name;  // Hugging Face's
  int64_t block = 0, offset = 0;
  std::vector<int64_t> shape;
  bool norm = false;  // an RMSNorm weight (1-D)
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Every tensor in Hugging Face's state_dict order: embed_tokens, each layer's (q, k, v, o,
// gate, up, down, input_layernorm, post_attention_layernorm), norm, lm_head (untied only).
std::vector<LlamaTensor> llama_tensors(const LlamaConfig& c);
// The tensors of one block, in block order.
std::vector<LlamaTensor> llama_block_tensors(const LlamaConfig& c, int64_t block);
int64_t llama_block_numel(const LlamaConfig& c, int64_t block);

// Reads the blocks `wanted` marks (empty: all) in block order into sink(b, fp32 values), one
// block in memory at a time. Every tensor must be there with its shape; a tied model's lm_head, if
// the file has one, is not read (Hugging Face ties it to the embedding). Errors name the file and
// the tensor.
Status read_llama_checkpoint(SafetensorsCheckpoint& checkpoint, const LlamaConfig& c,
                             const BlockSink& sink, const std::vector<bool>& wanted = {});
// Its two halves: every tensor of `c` is in the checkpoint (by the index alone; with `headers`,
// also with its shape and a dtype that reads, which maps every shard's header but reads no
// value); block b's values into `host` (llama_block_numel of them).
Status check_llama_checkpoint(SafetensorsCheckpoint& checkpoint, const LlamaConfig& c,
                              bool headers);
Status read_llama_block(SafetensorsCheckpoint& checkpoint, const LlamaConfig& c, int64_t block,
                        float* host);
// Elements [r.begin, r.end) of block `block` into host[0, r.end - r.begin): only the tensors
// (and of them only the rows) the range covers are read, so only their shards are mapped.
Status read_llama_elements(SafetensorsCheckpoint& checkpoint, const LlamaConfig& c, int64_t block,
                           ElementRange r, float* host);

// Writes config.json and the weights (source(b, host) gives block b's fp32 values) to `dir` as
// Hugging Face's save_pretrained does: model.safetensors, or shards of at most max_shard_bytes
// with model.safetensors.index.json. `stored`: F32, BF16 or F16. Returns the files written.
// A training checkpoint's parameters: one safetensors file of the same tensors, with config.json's
// text under the metadata key "config" (sync false: the checkpoint syncs it). And its reading:
// the config from the metadata (dtype f32: the run's precision decides).
Status write_llama_params_file(const std::string& path, const LlamaConfig& c, DType stored,
                               const BlockSource& source, bool sync);
Result<LlamaConfig> read_llama_params_config(const std::string& path);

// What a save of a checkpoint to `dir` may write or remove there (names within dir): config.json,
// model.safetensors, its index, and every shard-named file (model-NNNNN-of-NNNNN.safetensors)
// the directory holds now. Any other name in `dir` is left alone.
std::vector<std::string> llama_checkpoint_names(const std::string& dir);

Result<std::vector<std::string>> write_llama_checkpoint(const std::string& dir,
                                                        const LlamaConfig& c, DType stored,
                                                        int64_t max_shard_bytes,
                                                        const BlockSource& source);

}  // namespace strata::model
