// Counter-based random numbers: value i of stream (seed, stream_id) is a pure function of
// (seed, stream_id, i), so results never depend on thread count or timing (DESIGN.md §6).
#pragma once

#include <cmath>
#include <cstdint>

namespace strata {

// SplitMix64 finaliser: a bijective 64-bit mix with good avalanche.
constexpr uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class CounterRng {
 public:
  explicit constexpr CounterRng(uint64_t seed, uint64_t stream_id = 0)
      : key_(mix64(seed ^ mix64(stream_id + 0x5851f42d4c957f2dull))) {}

  constexpr uint64_t bits(uint64_t i) const { return mix64(key_ ^ mix64(i)); }
  // Uniform in [0, 1) with 24 random bits.
  constexpr float uniform(uint64_t i) const { return static_cast<float>(bits(i) >> 40) * 0x1p-24f; }
  // Uniform in [0, 1) with 53 random bits.
  constexpr double uniform_f64(uint64_t i) const {
    return static_cast<double>(bits(i) >> 11) * 0x1p-53;
  }
  // Standard normal (Box-Muller over two counters 2i, 2i+1).
  double normal(uint64_t i) const {
    const double u1 = (static_cast<double>(bits(2 * i) >> 11) + 0.5) * 0x1p-53;
    const double u2 = uniform_f64(2 * i + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Uniform integer in [0, n).
  constexpr uint64_t below(uint64_t i, uint64_t n) const {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(bits(i)) * n) >> 64);
  }

 private:
  uint64_t key_;
};

}  // namespace strata
