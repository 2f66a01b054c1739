#include "model/init.h"

#include <cmath>
#include <cstring>

// core/rng.h uses unsigned __int128, which -Wpedantic rejects.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include "core/rng.h"
#pragma GCC diagnostic pop
#include "model/param_layout.h"

namespace strata::model {
namespace {

void fill_normal(float* out, int64_t n, double stddev, uint64_t seed, uint64_t stream) {
  const CounterRng rng(seed, stream);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(stddev * rng.normal(static_cast<uint64_t>(i)));
  }
}

}  // namespace

std::vector<float> init_block(const GptConfig& config, int64_t block, uint64_t seed) {
  const bool shared = block == config.layers;
  TensorSpan spans[12];
  const int count = shared ? shared_tensors(config, spans) : layer_tensors(config, spans);
  const int64_t numel = spans[count - 1].offset + spans[count - 1].numel;
  std::vector<float> out(static_cast<size_t>(numel), 0.0f);
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.layers));
  for (int i = 0; i < count; ++i) {
    const TensorSpan& t = spans[i];
    float* p = out.data() + t.offset;
    const uint64_t stream = static_cast<uint64_t>(block) * 16 + static_cast<uint64_t>(i);
    const bool is_ln_weight = std::strcmp(t.name, "ln1w") == 0 ||
                              std::strcmp(t.name, "ln2w") == 0 || std::strcmp(t.name, "lnfw") == 0;
    const bool is_residual_proj =
        std::strcmp(t.name, "attprojw") == 0 || std::strcmp(t.name, "fcprojw") == 0;
    if (is_ln_weight) {
      for (int64_t k = 0; k < t.numel; ++k) p[k] = 1.0f;
    } else if (t.rows > 1) {  // a weight matrix (or an embedding table)
      fill_normal(p, t.numel, is_residual_proj ? residual_std : 0.02, seed, stream);
    }  // biases stay 0
  }
  return out;
}

}  // namespace strata::model
