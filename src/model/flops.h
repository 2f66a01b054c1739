// The model FLOPs of training, one definition for the trainer, the benches and the docs (MFU
// is these over the step's time and a peak rate: gpu/peak_flops.h). llm.c's count per token:
// 6·N for the matmuls of N parameters (forward 2N, backward 4N) and 6·L·C·T for attention's
// two matmuls per layer at context T (QKᵀ and PV, forward and backward, causal masking not
// discounted); the recompute of activation checkpointing is not counted. N counts every
// parameter (llm.c's padded vocabulary rows and position table included). GPT-2 124M (N
// 124475904, L 12, C 768) at T 1024: 803,478,528 FLOPs a token. Free functions; thread-safe.
#pragma once

#include <cstdint>

namespace strata::model {

inline double training_flops_per_token(int64_t params, int64_t layers, int64_t channels,
                                       int64_t seq) {
  return 6.0 * static_cast<double>(params) + 6.0 * static_cast<double>(layers) *
                                                 static_cast<double>(channels) *
                                                 static_cast<double>(seq);
}

}  // namespace strata::model
