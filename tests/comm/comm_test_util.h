// Test helpers: deterministic per-rank inputs, float64 references and the documented tolerance.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"

namespace strata::comm::testing {

// A typed host buffer of n elements.
struct Buf {
  DType dtype = DType::kF32;
  size_t n = 0;
  std::vector<std::byte> bytes;
  Buf() = default;
  Buf(DType t, size_t count) : dtype(t), n(count), bytes(count * dtype_size(t)) {}
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  double at(size_t i) const { return load_as_f32(bytes.data(), dtype, i); }
  void set(size_t i, double v) { store_from_f32(bytes.data(), dtype, i, static_cast<float>(v)); }
  std::byte* byte_ptr(size_t element) { return bytes.data() + element * dtype_size(dtype); }
};

// Element i of rank r's input for test `seed`: a value in about [-8, 8) rounded to the dtype
// (so the exact inputs are known), with the magnitude varying over several binades.
inline uint64_t mix(uint64_t z) {  // SplitMix64 finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline double input_value(uint64_t seed, int rank, size_t i, DType t) {
  const uint64_t bits = mix(mix(seed * 1000003u + static_cast<uint64_t>(rank)) ^ i);
  const double u = static_cast<double>(bits >> 11) * 0x1p-53 * 2.0 - 1.0;
  const double scale = std::ldexp(1.0, static_cast<int>(bits % 7) - 3);
  Buf one(t, 1);
  one.set(0, u * scale);
  return one.at(0);
}

inline Buf make_input(uint64_t seed, int rank, size_t n, DType t) {
  Buf b(t, n);
  for (size_t i = 0; i < n; ++i) b.set(i, input_value(seed, rank, i, t));
  return b;
}

// Unit in the last place of a finite value of type t at magnitude |v|.
inline double ulp_of(DType t, double v) {
  const int mant_bits = t == DType::kF32 ? 23 : (t == DType::kF16 ? 10 : 7);
  const int min_exp = t == DType::kF32 ? -126 : (t == DType::kF16 ? -14 : -126);
  int e = v == 0.0 ? min_exp : std::ilogb(std::fabs(v));
  if (e < min_exp) e = min_exp;
  return std::ldexp(1.0, e - mant_bits);
}

// The documented bound for a sum over n ranks with fp32 accumulation and one rounding to t:
// |r - s| <= ulp_t(s')/2 + (n-1) 2^-24 sum|x| (for f32 the final rounding is part of the
// accumulation, so the first term is dropped).
inline double sum_tolerance(DType t, int n, double exact, double sum_abs) {
  const double acc = (n - 1) * std::ldexp(1.0, -24) * sum_abs;
  if (t == DType::kF32) return acc;
  return 0.5 * ulp_of(t, std::fabs(exact) + acc) + acc;
}

}  // namespace strata::comm::testing
