// LlamaConfig: the shape of a Llama-family decoder (Hugging Face's LlamaForCausalLM: RMSNorm,
// rotary position embeddings in the rotate-half layout, grouped-query attention, the SwiGLU MLP,
// no biases, an untied or tied head), read from a Hugging Face config.json or taken from a preset
// of the published shapes, and its storage dtype. Values; thread-safe.
//
// config.json: `model_type` "llama" (or `architectures` naming LlamaForCausalLM); vocab_size,
// hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads
// (default: num_attention_heads), max_position_embeddings, rms_norm_eps, rope_theta (default
// 10000), rope_scaling (null, or rope_type "llama3" with factor, low_freq_factor,
// high_freq_factor, original_max_position_embeddings), tie_word_embeddings (default false).
// What would change the maths and strata does not do is refused naming the field: attention_bias
// or mlp_bias true, hidden_act other than "silu", head_dim other than hidden_size /
// num_attention_heads, attention_dropout other than 0, rope_scaling of another type. Keys that do
// not change the maths (token ids, torch_dtype, initializer_range, ...) are read or ignored.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::model {

// Llama 3's frequency-dependent rescaling of the rotary frequencies (rope_scaling rope_type
// "llama3"): wavelengths above original/low_freq_factor are divided by `factor`, those below
// original/high_freq_factor kept, those between interpolated.
struct Llama3RopeScaling {
  bool enabled = false;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

struct LlamaConfig {
  int64_t vocab = 0;         // V (vocab_size)
  int64_t channels = 0;      // C (hidden_size)
  int64_t intermediate = 0;  // I (intermediate_size)
  int64_t layers = 0;        // L (num_hidden_layers)
  int64_t heads = 0;         // NH (num_attention_heads), dividing C
  int64_t kv_heads = 0;      // NKV (num_key_value_heads), dividing NH
  int64_t max_seq = 0;       // max_position_embeddings
  double rms_eps = 1e-5;     // rms_norm_eps
  double rope_theta = 10000.0;
  Llama3RopeScaling rope_scaling;
  bool tied = false;          // tie_word_embeddings: the head is the embedding
  DType dtype = DType::kF32;  // storage of parameters, gradients and activations

  int64_t head_size() const { return heads > 0 ? channels / heads : 0; }
  // One layer's parameters: C (input norm) + C*(NH + 2 NKV)*HS (q, k, v) + C*C (o) + 3*C*I
  // (gate, up, down) + C (post-attention norm).
  int64_t layer_params() const;
  // Embedding V*C, final norm C, and the head V*C unless tied.
  int64_t shared_params() const;
  int64_t num_params() const { return layers * layer_params() + shared_params(); }
  // "llama L=16 C=2048 NH=32 NKV=8 I=8192 V=128256 tied bf16"
  std::string describe() const;
  // kConfig naming the field (config.json's name), its value and what is accepted; `what`
  // begins the message (the file read).
  Status validate(const std::string& what = "llama config") const;
  // The rotary inverse frequencies theta^(-2i/HS) for i < HS/2, with llama3 scaling when set,
  // computed in float64 and rounded to fp32 (Hugging Face computes them in fp32).
  std::vector<float> inv_freq() const;
};

// Reads a Hugging Face config.json (a file, or a directory holding one). Errors name the file
// and the field.
Result<LlamaConfig> read_hf_llama_config(const std::string& path);
// The same JSON text (`what` names it in errors).
Result<LlamaConfig> parse_hf_llama_config(const std::string& json_text, const std::string& what);
// config.json for `c` as Hugging Face writes it for LlamaForCausalLM.
std::string hf_llama_config_json(const LlamaConfig& c);

// The published shapes: llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, llama-2-7b, llama-2-13b,
// llama-3.1-70b (dtype bf16). Unknown names: kConfig listing the known ones.
Result<LlamaConfig> llama_preset(std::string_view name);
std::vector<std::string> llama_preset_names();

}  // namespace strata::model
