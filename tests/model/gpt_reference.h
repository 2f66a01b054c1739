// Independent float64 host implementation of the GPT forward pass and mean cross-entropy, written
// straight from the math (not from the device kernels), for the model's gradient check.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace strata::model::testing {

// blocks[l] for l < L are layer blocks, blocks[L] the shared block, in param_layout.h order.
// tokens/targets [B*T]; targets < 0 are ignored. Returns the mean loss over valid targets.
double reference_loss(const GptConfig& config, const std::vector<std::vector<double>>& blocks,
                      const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                      int64_t batch, int64_t seq);

}  // namespace strata::model::testing
