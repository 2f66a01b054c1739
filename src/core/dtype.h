// Element types and scalar fp16/bf16 conversions.
// Conversions to 16 bits round to nearest even; NaN stays NaN (quiet, sign kept), ±Inf stays
// ±Inf, values past the largest finite 16-bit value round to ±Inf as IEEE 754 specifies, and
// subnormals are produced and read exactly. Pure functions; thread-safe.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace strata {

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

constexpr size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }
std::string_view dtype_name(DType t);  // "f32", "f16", "bf16"
// Accepts f32|fp32|float32, f16|fp16|float16, bf16|bfloat16.
Result<DType> parse_dtype(std::string_view name);

constexpr float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in fp32.
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | sign);
  }
  if (exp == 31) {
    // Inf, or NaN with its payload kept.
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

constexpr uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {
    if (a == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    // NaN: keep the top payload bits and force the quiet bit so it cannot become Inf.
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 -> Inf
  if (a < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal half or zero, in units of 2^-24.
    if (a <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 rounds to 0 (tie to even)
    const uint32_t exp = a >> 23;
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  const uint32_t r = a - 0x38000000u;  // rebias the exponent from 127 to 15
  uint32_t q = r >> 13;
  const uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | q);
}

constexpr float bf16_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

constexpr uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN stays NaN (quiet bit set)
  }
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);  // overflow rounds to Inf
}

// Reads element i of a buffer of type t as float.
inline float load_as_f32(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
  }
  return 0.0f;
}

// Writes v to element i of a buffer of type t, rounding to nearest even.
inline void store_from_f32(void* data, DType t, size_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(data)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(data)[i] = f32_to_f16(v); break;
    case DType::kBF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(v); break;
  }
}

// Converts n elements between any two types (scalar loop; hot paths have SIMD versions).
void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

}  // namespace strata
