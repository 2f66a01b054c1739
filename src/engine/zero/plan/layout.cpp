#include "engine/zero/plan/layout.h"

namespace strata::engine::zero {

std::vector<Home> choose_homes(const Layout& lay, Home offload_param, double gpu_fraction) {
  const auto nb = int64_t(lay.parts.num_blocks());
  std::vector<Home> home(size_t(nb), Home::kDevice);
  // Below stage 3 nothing is sharded (EngineConfig::validate refuses an offload_param there).
  if (lay.stage != 3) return home;
  const bool offloaded = offload_param != Home::kDevice;
  std::vector<int64_t> order{nb - 1};
  for (int64_t b = 0; b + 1 < nb; ++b) order.push_back(b);
  double total = 0.0;
  for (int64_t b : order) total += lay.sharded(b) ? double(lay.numel(b)) : 0.0;
  double taken = 0.0;
  for (int64_t b : order) {
    if (!lay.sharded(b)) continue;
    const double n = double(lay.numel(b));
    const bool resident = offloaded ? taken + 0.5 * n <= gpu_fraction * total : true;
    if (resident) taken += n;
    home[size_t(b)] = resident ? Home::kDevice : offload_param;
  }
  return home;
}

}  // namespace strata::engine::zero
