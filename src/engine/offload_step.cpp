#include "engine/offload_step.h"

namespace strata::engine {

std::vector<int64_t> partition_blocks(const model::GptModel& model) {
  const int64_t layers = model.config().layers;
  std::vector<int64_t> blocks;
  for (int64_t l = layers - 1; l >= 0; --l) blocks.push_back(l);
  blocks.push_back(layers);
  return blocks;
}

float clip_coefficient(float grad_clip, double norm) {
  return grad_clip > 0.0f && norm > grad_clip ? static_cast<float>(grad_clip / norm) : 1.0f;
}

Status nonfinite_gradient_error(int64_t step) {
  return make_error(ErrorCode::kInternal, "step ", step, ": non-finite gradient (lower --lr)");
}

}  // namespace strata::engine
