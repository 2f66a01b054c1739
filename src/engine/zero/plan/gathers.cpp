// Stage 2 of the ZeRO plan compiler: the gather schedule (gathers.h).
#include "engine/zero/plan/gathers.h"

namespace strata::engine::zero {

size_t find_gather(const std::vector<Gather>& gathers, int64_t block, int phase) {
  for (size_t k = 0; k < gathers.size(); ++k) {
    if (gathers[k].block == block && gathers[k].phase == phase) return k;
  }
  return gathers.size();
}

std::vector<Gather> schedule_gathers(const std::vector<Op>& ops,
                                     const std::vector<bool>& gathered) {
  std::vector<Gather> gathers;
  for (size_t i = 0; i < ops.size(); ++i) {
    for (const auto& [b, ph] : ops[i].uses) {
      if (!gathered[size_t(b)]) continue;
      const size_t k = find_gather(gathers, b, ph);
      if (k == gathers.size()) {
        gathers.push_back({b, ph, i, i});
      } else {
        gathers[k].last = i;
      }
    }
  }
  return gathers;
}

}  // namespace strata::engine::zero
