// Scalar path of the CPU Adam kernels (any x86-64 CPU). std::fma gives the same single rounding
// as the SIMD paths' fused multiply-add (in hardware where the CPU has it, else in libm), so this
// path is bit-identical to them; it is the reference-speed fallback, not a fast path.
#include <cmath>

#include "core/dtype.h"
#include "cpu/cpu_adam_simd.h"

namespace strata::cpu::detail {
namespace {

struct ScalarV {
  using F = float;
  static constexpr int64_t kWidth = 1;
  static F set1(float x) { return x; }
  static F load(const float* p) { return *p; }
  static void store(float* p, F x) { *p = x; }
  static F mul(F a, F b) { return a * b; }
  static F fma(F a, F b, F c) { return std::fma(a, b, c); }
  static F sqrt(F a) { return std::sqrt(a); }
  static F div(F a, F b) { return a / b; }
  static void fence() {}

  template <DType G>
  static F load_grad(const void* g, int64_t i) {
    if constexpr (G == DType::kF32) return static_cast<const float*>(g)[i];
    if constexpr (G == DType::kF16) return f16_to_f32(static_cast<const uint16_t*>(g)[i]);
    if constexpr (G == DType::kBF16) return bf16_to_f32(static_cast<const uint16_t*>(g)[i]);
  }
  template <OutKind O>
  static void store16(void* out, int64_t i, F x, bool /*stream*/) {
    if constexpr (O == OutKind::kF16) static_cast<uint16_t*>(out)[i] = f32_to_f16(x);
    if constexpr (O == OutKind::kBF16) static_cast<uint16_t*>(out)[i] = f32_to_bf16(x);
  }

  struct Acc {
    double lane[16];
  };
  static Acc acc_zero() { return Acc{}; }
  template <DType G>
  static void acc_block16(Acc& acc, const void* g, int64_t i) {
    for (int j = 0; j < 16; ++j) {
      const double x = load_grad<G>(g, i + j);
      acc.lane[j] += x * x;  // exact product in fp64, one rounding in the add
    }
  }
  static void acc_lanes(const Acc& acc, double out[16]) {
    for (int j = 0; j < 16; ++j) out[j] = acc.lane[j];
  }
};

}  // namespace

AdamChunkFn adam_kernel_scalar(DType grad, OutKind out, bool l2, bool decoupled) {
  return pick_adam<ScalarV>(grad, out, l2, decoupled);
}
SumSquaresFn sum_squares_kernel_scalar(DType grad) { return pick_sum_squares<ScalarV>(grad); }
Cast16Fn cast16_kernel_scalar(OutKind out) { return pick_cast16<ScalarV>(out); }

}  // namespace strata::cpu::detail
