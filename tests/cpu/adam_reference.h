// Test-only float64 reference for CPU Adam / AdamW, written independently of src/cpu, with a
// worst-case forward error bound for an fp32 evaluation of the update.
//
// Each reference quantity is a Bounded {x, e}: x is the mathematically exact value (computed in
// fp64 from the fp32 inputs and the float hyper-parameters), e bounds |fp32 result - x| for an
// implementation that rounds once per operation of the textbook formula (unit roundoff 2^-24,
// plus 2^-149 per operation for subnormal results; a fused multiply-add is allowed to round once
// or twice). Derived constants (1 - b1, -lr / (1 - b1^t), 1 / sqrt(1 - b2^t), 1 - lr * wd) may
// be rounded to fp32 once. This is the "ulp bound" the tests state: a few fp32 ulps of the
// magnitudes of the terms, propagated through the formula.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

namespace strata::cpu::testing {

constexpr double kUnitRoundoff = 0x1p-24;
constexpr double kSubnormalStep = 0x1p-149;

struct Bounded {
  double x = 0.0;
  double e = 0.0;
};

inline Bounded exact(double x) { return {x, 0.0}; }
inline Bounded rounded_const(double x) { return {x, kUnitRoundoff * std::fabs(x)}; }
inline Bounded round_op(double x, double propagated) {
  return {x, propagated + kUnitRoundoff * (std::fabs(x) + propagated) + kSubnormalStep};
}
inline Bounded mul(Bounded a, Bounded b) {
  return round_op(a.x * b.x, std::fabs(a.x) * b.e + std::fabs(b.x) * a.e + a.e * b.e);
}
inline Bounded add(Bounded a, Bounded b) { return round_op(a.x + b.x, a.e + b.e); }
inline Bounded fused(Bounded a, Bounded b, Bounded c) { return add(mul(a, b), c); }
inline Bounded root(Bounded a) {
  const double x = std::sqrt(std::max(a.x, 0.0));
  const double prop = a.x > 0.0 ? std::min(a.e / x, std::sqrt(a.e)) : std::sqrt(a.e);
  return round_op(x, prop);
}
// Quotient; when the divisor's bound reaches zero, the caller supplies a fallback magnitude
// bound `max_abs_result` for the implementation's result.
inline Bounded quotient(Bounded a, Bounded b, double max_abs_result) {
  const double x = a.x / b.x;
  if (std::fabs(b.x) > b.e) {
    const double prop = (a.e + std::fabs(x) * b.e) / (std::fabs(b.x) - b.e);
    if (prop < max_abs_result + std::fabs(x)) return round_op(x, prop);
  }
  return {x, max_abs_result + std::fabs(x)};
}

struct RefHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;  // AdamW
  bool bias_correction;
};

struct RefState {
  Bounded p, m, v;
};

// Bias corrections 1 - beta^t for step t >= 1 (1 without bias correction).
struct RefBias {
  double bc1, bc2;
};
inline RefBias reference_bias(const RefHyper& h, int64_t t) {
  long double b1t = 1.0L, b2t = 1.0L;
  for (int64_t i = 0; i < t; ++i) {
    b1t *= h.beta1;
    b2t *= h.beta2;
  }
  if (!h.bias_correction) return {1.0, 1.0};
  return {static_cast<double>(1.0L - b1t), static_cast<double>(1.0L - b2t)};
}

// One Adam / AdamW step for one element.
inline RefState reference_step(const RefHyper& h, const RefBias& bias, double grad_scale, double p,
                               double m, double v, double grad) {
  const double bc1 = bias.bc1;
  const double bc2 = bias.bc2;
  Bounded g = mul(exact(grad), exact(grad_scale));
  if (!h.decoupled && h.weight_decay != 0.0) g = fused(exact(h.weight_decay), exact(p), g);
  const Bounded m1 = fused(exact(h.beta1), exact(m), mul(rounded_const(1.0 - h.beta1), g));
  const Bounded v1 = fused(exact(h.beta2), exact(v), mul(mul(rounded_const(1.0 - h.beta2), g), g));
  const Bounded d = fused(root(v1), rounded_const(1.0 / std::sqrt(bc2)), exact(h.eps));
  // The implementation's denominator is at least eps (sqrt >= 0 plus eps, rounded upward-safe).
  const double max_update = (std::fabs(m1.x) + m1.e) / h.eps * (1.0 + 4 * kUnitRoundoff);
  const Bounded update = quotient(m1, d, max_update);
  Bounded p1 = exact(p);
  if (h.decoupled && h.weight_decay != 0.0) {
    p1 = mul(p1, rounded_const(1.0 - h.lr * h.weight_decay));
  }
  p1 = fused(rounded_const(-h.lr / bc1), update, p1);
  return {p1, m1, v1};
}

// |got - want.x| within the bound (with a margin of 1e-3 of the bound for the fp64 evaluation
// of the reference itself). Returns |err| / bound (<= 1 passes) or +inf when got is not finite.
inline double bound_ratio(float got, const Bounded& want) {
  if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
  const double err = std::fabs(static_cast<double>(got) - want.x);
  if (err == 0.0) return 0.0;
  return err / (want.e * 1.001);
}

// Seed for "fresh random inputs": STRATA_TEST_SEED when set, else a new one each run; tests
// print it so a failure can be replayed.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("STRATA_TEST_SEED")) {
      return static_cast<uint64_t>(std::strtoull(s, nullptr, 0));
    }
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
  }();
  return seed;
}

}  // namespace strata::cpu::testing
