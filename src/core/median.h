// The median of a set of measurements (repeated timings, calibration rows): the middle value, or
// the mean of the two middle ones for an even count; 0 when there is none.
//
// A value; thread-safe.
#pragma once

#include <algorithm>
#include <vector>

namespace strata {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace strata
