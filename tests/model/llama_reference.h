// A float64 reference of Hugging Face's LlamaForCausalLM forward (RMSNorm, rotate-half RoPE,
// grouped-query attention with repeated key/value heads, SwiGLU MLP, final norm, lm_head or the
// tied embedding, mean cross-entropy), written from the definitions (REFERENCE.md), independent
// of the kernels, over strata's blocks as Hugging Face's tensors (llama_layout.h). Plain loops.
#pragma once

#include <cstdint>
#include <vector>

#include "model/llama_config.h"

namespace strata::model::test {

// blocks[b]: block b's values (llama_layout.h). Mean loss over targets >= 0.
double llama_reference_loss(const LlamaConfig& c, const std::vector<std::vector<double>>& blocks,
                            const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                            int64_t B, int64_t T);

}  // namespace strata::model::test
