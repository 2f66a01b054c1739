// A counter-based generator for test inputs (splitmix64 of the counter). Local to these tests
// because core/rng.h does not compile under -Wpedantic -Werror (unsigned __int128).
#pragma once

#include <cstdint>

namespace strata::gpu::testing {

class TestRng {
 public:
  explicit TestRng(uint64_t seed, uint64_t stream = 0)
      : key_(mix(seed ^ mix(stream + 0x9e3779b97f4a7c15ull))) {}
  uint64_t bits(uint64_t i) const { return mix(key_ ^ mix(i)); }
  // Uniform in [0, 1) with 24 random bits.
  float uniform(uint64_t i) const { return static_cast<float>(bits(i) >> 40) * 0x1p-24f; }
  // Integer in [0, n) (modulo bias is irrelevant for tests).
  uint64_t below(uint64_t i, uint64_t n) const { return bits(i) % n; }

 private:
  static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t key_;
};

}  // namespace strata::gpu::testing
