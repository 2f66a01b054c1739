// GPT-2 initialisation on the host in fp32: weights normal(0, 0.02), the two residual
// projections (attprojw, fcprojw) normal(0, 0.02 / sqrt(2L)), biases 0, layernorm weights 1.
// Each tensor draws from its own CounterRng stream (seed, block * 16 + tensor index), so the
// values do not depend on the order blocks are initialised in. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace strata::model {

// Block b < L is layer b; block L is the shared block (param_layout.h).
std::vector<float> init_block(const GptConfig& config, int64_t block, uint64_t seed);

}  // namespace strata::model
