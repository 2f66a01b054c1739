// Where each parameter tensor lives inside a flat block (DESIGN.md §6: model state in flat
// arenas addressed by offsets). A model has L+1 blocks: block l < L is layer l, in llm.c's
// per-layer order (ln1w, ln1b, qkvw [3C,C], qkvb, attprojw [C,C], attprojb, ln2w, ln2b,
// fcw [4C,C], fcb [4C], fcprojw [C,4C], fcprojb); block L is the shared block
// (wte [Vp,C], wpe [maxT,C], lnfw, lnfb). Weights are row-major, output dimension first.
// Offsets and sizes are in elements. Values; thread-safe.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace strata::model {

struct LayerLayout {
  int64_t ln1w = 0, ln1b = 0, qkvw = 0, qkvb = 0, attprojw = 0, attprojb = 0;
  int64_t ln2w = 0, ln2b = 0, fcw = 0, fcb = 0, fcprojw = 0, fcprojb = 0;
  int64_t numel = 0;  // 12C^2 + 13C
};

struct SharedLayout {
  int64_t wte = 0, wpe = 0, lnfw = 0, lnfb = 0;
  int64_t numel = 0;  // Vp*C + maxT*C + 2C
};

LayerLayout layer_layout(const GptConfig& config);
SharedLayout shared_layout(const GptConfig& config);

// One named tensor of a block (for init, gradient checks and loaders).
struct TensorSpan {
  const char* name;
  int64_t offset;
  int64_t numel;
  int64_t rows;  // output dimension for weights; 1 for vectors
};
// The tensors of a layer block (12) or of the shared block (4), in storage order.
int layer_tensors(const GptConfig& config, TensorSpan out[12]);
int shared_tensors(const GptConfig& config, TensorSpan out[4]);

}  // namespace strata::model
