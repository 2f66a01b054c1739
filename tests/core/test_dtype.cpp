// fp16 / bf16 conversions (core/dtype.h) on all 65,536 patterns of each format, against an
// independent decoder, midpoint / tie / overflow / subnormal cases and a brute-force nearest
// search for random fp32 inputs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace strata {
namespace {

struct Format {
  const char* name;
  int mant_bits;  // stored mantissa bits
  int bias;
  uint16_t (*encode)(float);
  float (*decode)(uint16_t);
};

const Format kF16{"f16", 10, 15, [](float f) { return f32_to_f16(f); },
                  [](uint16_t h) { return f16_to_f32(h); }};
const Format kBF16{"bf16", 7, 127, [](float f) { return f32_to_bf16(f); },
                   [](uint16_t h) { return bf16_to_f32(h); }};

int exp_bits(const Format& f) { return 15 - f.mant_bits; }
uint16_t exp_max(const Format& f) { return static_cast<uint16_t>((1u << exp_bits(f)) - 1u); }
uint16_t exp_of(const Format& f, uint16_t h) { return (h & 0x7fffu) >> f.mant_bits; }
uint16_t mant_of(const Format& f, uint16_t h) { return h & ((1u << f.mant_bits) - 1u); }
bool is_nan(const Format& f, uint16_t h) { return exp_of(f, h) == exp_max(f) && mant_of(f, h); }

// Independent decoder in double: (-1)^s * 2^(e - bias) * 1.m, subnormals 2^(1 - bias) * 0.m.
double decode_ref(const Format& f, uint16_t h) {
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  const int e = exp_of(f, h);
  const double m = mant_of(f, h);
  if (e == exp_max(f)) return m != 0 ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, 1 - f.bias - f.mant_bits);
  return sign * std::ldexp(m + std::ldexp(1.0, f.mant_bits), e - f.bias - f.mant_bits);
}

// Magnitude of positive pattern h, with pattern exp_max<<mant (Inf) standing for the first value
// past the range, 2^(emax + 1), as IEEE 754 overflow rounding uses it.
double magnitude(const Format& f, uint16_t h) {
  if (exp_of(f, h) == exp_max(f)) return std::ldexp(1.0, exp_max(f) - f.bias);
  return decode_ref(f, h);
}

class DTypeAllPatterns : public ::testing::TestWithParam<const Format*> {};

TEST_P(DTypeAllPatterns, DecodeMatchesReferenceAndRoundTrips) {
  const Format& f = *GetParam();
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float x = f.decode(h);
    const double want = decode_ref(f, h);
    if (is_nan(f, h)) {
      ASSERT_TRUE(std::isnan(x)) << f.name << " " << i;
      const uint16_t back = f.encode(x);
      ASSERT_TRUE(is_nan(f, back)) << f.name << " NaN " << i << " became " << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << "NaN sign";
      continue;
    }
    ASSERT_EQ(static_cast<double>(x), want) << f.name << " " << i;
    ASSERT_EQ(std::signbit(x), (h & 0x8000u) != 0) << f.name << " " << i;
    ASSERT_EQ(f.encode(x), h) << f.name << " round trip " << i;
  }
}

// Points around each midpoint between consecutive representable magnitudes h and h + 1.
TEST_P(DTypeAllPatterns, RoundsToNearestEvenAtEveryMidpoint) {
  const Format& f = *GetParam();
  const uint16_t inf = static_cast<uint16_t>(exp_max(f) << f.mant_bits);
  for (uint16_t h = 0; h < inf; ++h) {
    const double a = magnitude(f, h);
    const double b = magnitude(f, static_cast<uint16_t>(h + 1));
    const double mid = (a + b) / 2;
    const auto mid_f = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(mid_f), mid) << "midpoint not exact in fp32";
    const uint16_t even = (h & 1u) ? static_cast<uint16_t>(h + 1) : h;
    const float below = std::nextafter(mid_f, 0.0f);
    const float above = std::nextafter(mid_f, INFINITY);
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(f.encode(s * mid_f), sign | even) << f.name << " tie above " << h;
      ASSERT_EQ(f.encode(s * below), sign | h) << f.name << " below mid above " << h;
      ASSERT_EQ(f.encode(s * above), sign | (h + 1)) << f.name << " above mid above " << h;
      const auto a_f = static_cast<float>(a);
      ASSERT_EQ(f.encode(s * std::nextafter(a_f, INFINITY)), sign | h) << f.name << " " << h;
      if (h > 0) {
        ASSERT_EQ(f.encode(s * std::nextafter(a_f, 0.0f)), sign | h) << f.name << " " << h;
      }
    }
  }
  // fp32 values below the smallest 16-bit subnormal's half round to (signed) zero.
  EXPECT_EQ(f.encode(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(f.encode(-std::numeric_limits<float>::denorm_min()), 0x8000);
  EXPECT_EQ(f.encode(INFINITY), inf);
  EXPECT_EQ(f.encode(-INFINITY), 0x8000 | inf);
  EXPECT_EQ(f.encode(std::numeric_limits<float>::max()), inf);
}

// Nearest representable value by linear search; ties go to the even pattern.
uint16_t nearest_brute_force(const Format& f, float x, const std::vector<double>& mags) {
  const double ax = std::fabs(static_cast<double>(x));
  uint16_t best = 0;
  double best_dist = INFINITY;
  for (size_t h = 0; h < mags.size(); ++h) {
    const double d = std::fabs(mags[h] - ax);
    if (d < best_dist || (d == best_dist && (h & 1u) == 0)) {
      best_dist = d;
      best = static_cast<uint16_t>(h);
    }
  }
  (void)f;
  return static_cast<uint16_t>((std::signbit(x) ? 0x8000u : 0u) | best);
}

TEST_P(DTypeAllPatterns, RandomInputsMatchBruteForceNearest) {
  const Format& f = *GetParam();
  const uint16_t inf = static_cast<uint16_t>(exp_max(f) << f.mant_bits);
  std::vector<double> mags;
  for (uint16_t h = 0; h <= inf; ++h) mags.push_back(magnitude(f, h));
  std::mt19937_64 gen(std::random_device{}());
  // Exponents spanning the format's range and a little past it on both sides.
  const int lo = 1 - f.bias - f.mant_bits - 3;
  const int hi = exp_max(f) - f.bias + 2;
  std::uniform_int_distribution<int> exp_dist(lo, hi);
  std::uniform_int_distribution<uint32_t> mant_dist(0, (1u << 23) - 1);
  for (int k = 0; k < 4000; ++k) {
    const double mant = 1.0 + std::ldexp(static_cast<double>(mant_dist(gen)), -23);
    auto x = static_cast<float>(std::ldexp(mant, exp_dist(gen)));
    if (k & 1) x = -x;
    ASSERT_EQ(f.encode(x), nearest_brute_force(f, x, mags))
        << f.name << " x " << x << " bits " << std::bit_cast<uint32_t>(x);
  }
}

TEST_P(DTypeAllPatterns, NanStaysNan) {
  const Format& f = *GetParam();
  for (uint32_t payload : {0x400000u, 0x000001u, 0x7fffffu, 0x200000u, 0x001fffu}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float x = std::bit_cast<float>(sign | 0x7f800000u | payload);
      const uint16_t h = f.encode(x);
      EXPECT_TRUE(is_nan(f, h)) << f.name << " payload " << payload;
      EXPECT_EQ((h & 0x8000u) != 0, sign != 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, DTypeAllPatterns, ::testing::Values(&kF16, &kBF16),
                         [](const auto& param_info) {
                           return std::string(param_info.param->name);
                         });

TEST(DType, F16OverflowThresholdIs65520) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00);
}

// convert() of every pair of types, element for element as encode(decode(x)) of the functions
// tested above (the same type: a copy of the bits): every 16-bit pattern, and fp32 values around
// every 16-bit pattern's midpoints (ties, subnormals, overflow, NaN, Inf), at odd offsets and
// lengths.
TEST(DType, ConvertEveryPairEqualsTheElementFunctions) {
  std::vector<float> f32;
  std::vector<uint16_t> h16;
  for (uint32_t h = 0; h < 65536; ++h) {
    h16.push_back(static_cast<uint16_t>(h));
    const float v = bf16_to_f32(static_cast<uint16_t>(h));
    f32.push_back(v);
    f32.push_back(std::bit_cast<float>(std::bit_cast<uint32_t>(v) + 0x8000u));  // a bf16 tie
    f32.push_back(f16_to_f32(static_cast<uint16_t>(h)));
    f32.push_back(std::bit_cast<float>(
        std::bit_cast<uint32_t>(f16_to_f32(static_cast<uint16_t>(h))) + 0x1000u));  // f16 tie
  }
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16};
  for (DType s : types) {
    const void* src = s == DType::kF32 ? static_cast<const void*>(f32.data()) : h16.data();
    const size_t n = (s == DType::kF32 ? f32.size() : h16.size()) - 3;  // an odd length
    for (DType d : types) {
      std::vector<uint32_t> got(n + 1, 0xdeadbeefu), want(n + 1, 0xdeadbeefu);
      const auto* from = static_cast<const std::byte*>(src) + dtype_size(s);  // odd offset
      convert(from, s, got.data(), d, n);
      if (s == d) {
        std::memcpy(want.data(), from, n * dtype_size(s));  // the same type: the bits, NaNs too
      } else {
        for (size_t i = 0; i < n; ++i) store_from_f32(want.data(), d, i, load_as_f32(from, s, i));
      }
      ASSERT_EQ(got, want) << dtype_name(s) << " -> " << dtype_name(d);
    }
  }
}

TEST(DType, ParseAndNames) {
  EXPECT_EQ(parse_dtype("bf16").value(), DType::kBF16);
  EXPECT_EQ(parse_dtype("fp16").value(), DType::kF16);
  EXPECT_EQ(parse_dtype("float32").value(), DType::kF32);
  EXPECT_EQ(parse_dtype("int8").status().code(), ErrorCode::kConfig);
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
}

}  // namespace
}  // namespace strata
