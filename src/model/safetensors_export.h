// Export of a GPT's weights as a safetensors file with the tensor names and layouts of Hugging
// Face's GPT-2 (the `gpt2` checkpoints): wte.weight [V, C] (the padding rows dropped),
// wpe.weight [maxT, C], h.{l}.ln_1.{weight,bias}, h.{l}.attn.c_attn.{weight [C, 3C], bias},
// h.{l}.attn.c_proj.{weight [C, C], bias}, h.{l}.ln_2.{weight,bias}, h.{l}.mlp.c_fc.{weight
// [C, 4C], bias}, h.{l}.mlp.c_proj.{weight [4C, C], bias}, ln_f.{weight,bias}. GPT-2's linear
// layers are Conv1D with weights stored [in, out], so strata's [out, in] weights are transposed.
// Written by write_safetensors_file (safetensors_write.h: a temporary name, synced, renamed), one
// block held at a time beside the shared one. Free function; thread-safe.
#pragma once

#include <string>

#include "core/status.h"
#include "model/config.h"
#include "model/model_file.h"

namespace strata::model {

// `stored`: kF32 ("F32") or kBF16 ("BF16", rounded to nearest even). source(b, host) as for
// write_model_file; the shared block is asked for first, then layers 0..L-1.
Status write_safetensors(const std::string& path, const GptConfig& config, DType stored,
                         const BlockSource& source);

}  // namespace strata::model
