// grad_check against a long-double reference sum and planted NaN / Inf values, for every
// gradient dtype, size and ISA path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "adam_reference.h"
#include "core/dtype.h"
// core/rng.h uses unsigned __int128, which -Wpedantic rejects (reported to the lead).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include "core/rng.h"
#pragma GCC diagnostic pop
#include "cpu/cpu_adam.h"

namespace strata::cpu {
namespace {

std::vector<Isa> isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(detect_isa())) out.push_back(isa);
  }
  return out;
}

std::vector<unsigned char> random_grads(int64_t n, DType t, uint64_t stream) {
  std::vector<unsigned char> g(n * dtype_size(t));
  const CounterRng rng(testing::test_seed(), stream);
  for (int64_t i = 0; i < n; ++i) {
    const int e = static_cast<int>(rng.below(2 * i + 1, 24)) - 20;
    store_from_f32(g.data(), t, i, static_cast<float>(std::ldexp(rng.normal(i), e)));
  }
  return g;
}

TEST(GradCheck, SumOfSquaresMatchesReference) {
  uint64_t stream = 0;
  for (int64_t n : {0, 1, 15, 17, 4097, 1000003}) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message()
                   << "seed " << testing::test_seed() << " n " << n << " " << dtype_name(t));
      const auto g = random_grads(n, t, ++stream);
      const float scale = 0.731f;
      long double want = 0.0L;
      for (int64_t i = 0; i < n; ++i) {
        const long double x = static_cast<long double>(load_as_f32(g.data(), t, i)) * scale;
        want += x * x;
      }
      std::vector<double> got;
      for (Isa isa : isas()) {
        const GradStats s = grad_check(g.data(), t, n, scale, isa);
        EXPECT_FALSE(s.has_nonfinite);
        // fp64 sums of n non-negative terms: relative error below n * 2^-52.
        EXPECT_LE(std::fabs(s.sum_squares - static_cast<double>(want)),
                  static_cast<double>(want) * (n + 4) * 0x1p-52)
            << isa_name(isa);
        got.push_back(s.sum_squares);
      }
      for (size_t k = 1; k < got.size(); ++k) {
        EXPECT_EQ(std::memcmp(&got[0], &got[k], sizeof(double)), 0) << "ISA paths differ";
      }
    }
  }
}

TEST(GradCheck, ReportsNanAndInf) {
  for (int64_t n : {1, 17, 4097, 1000003}) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      auto g = random_grads(n, t, 77);
      for (Isa isa : isas()) {
        ASSERT_FALSE(grad_check(g.data(), t, n, 1.0f, isa, 1024).has_nonfinite);
      }
      const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity()};
      for (float special : specials) {
        for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
          auto bad = g;
          store_from_f32(bad.data(), t, pos, special);
          for (Isa isa : isas()) {
            EXPECT_TRUE(grad_check(bad.data(), t, n, 1.0f, isa, 1024).has_nonfinite)
                << "n " << n << " " << dtype_name(t) << " pos " << pos << " value " << special
                << " " << isa_name(isa);
          }
        }
      }
      if (t == DType::kF16) {
        // A value past the fp16 range (an overflowed fp16 gradient) is Inf.
        auto bad = g;
        store_from_f32(bad.data(), t, n - 1, 70000.0f);
        EXPECT_TRUE(grad_check(bad.data(), t, n).has_nonfinite);
      }
    }
  }
}

TEST(GradCheck, LargeFiniteValuesAreNotNonfinite) {
  const float big = std::numeric_limits<float>::max();
  std::vector<float> g(4097, big);
  const GradStats s = grad_check(g.data(), DType::kF32, 4097);
  EXPECT_FALSE(s.has_nonfinite);
  EXPECT_NEAR(s.sum_squares / (static_cast<double>(big) * big), 4097.0, 1e-9);
}

}  // namespace
}  // namespace strata::cpu
