// AVX2 + FMA + F16C path of the CPU Adam kernels (8 floats per vector). Built with
// -mavx2 -mfma -mf16c and only called after run-time detection (detect_isa / parse_isa).
#include <immintrin.h>

#include "cpu/cpu_adam_simd.h"

namespace strata::cpu::detail {
namespace {

struct Avx2V {
  using F = __m256;
  static constexpr int64_t kWidth = 8;
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static void fence() { _mm_sfence(); }

  template <DType G>
  static F load_grad(const void* g, int64_t i) {
    if constexpr (G == DType::kF32) {
      return _mm256_loadu_ps(static_cast<const float*>(g) + i);
    } else {
      const __m128i h =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(g) + i));
      if constexpr (G == DType::kF16) return _mm256_cvtph_ps(h);
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }

  // bf16 round to nearest even by integer ops; NaN keeps its top bits with the quiet bit set.
  static __m128i to_bf16(F x) {
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  }

  template <OutKind O>
  static void store16(void* out, int64_t i, F x, bool stream) {
    __m128i h;
    if constexpr (O == OutKind::kF16) {
      h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      h = to_bf16(x);
    }
    auto* dst = reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i);
    if (stream) {
      _mm_stream_si128(dst, h);
    } else {
      _mm_storeu_si128(dst, h);
    }
  }

  struct Acc {
    __m256d lane[4];  // lanes 0-3, 4-7, 8-11, 12-15
  };
  static Acc acc_zero() {
    return Acc{
        {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()}};
  }
  template <DType G>
  static void acc_block16(Acc& acc, const void* g, int64_t i) {
    for (int h = 0; h < 2; ++h) {
      const F x = load_grad<G>(g, i + 8 * h);
      const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
      const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
      // The product of two fp32 values is exact in fp64, so the fma rounds once like mul+add.
      acc.lane[2 * h] = _mm256_fmadd_pd(lo, lo, acc.lane[2 * h]);
      acc.lane[2 * h + 1] = _mm256_fmadd_pd(hi, hi, acc.lane[2 * h + 1]);
    }
  }
  static void acc_lanes(const Acc& acc, double out[16]) {
    for (int j = 0; j < 4; ++j) _mm256_storeu_pd(out + 4 * j, acc.lane[j]);
  }
};

}  // namespace

AdamChunkFn adam_kernel_avx2(DType grad, OutKind out, bool l2, bool decoupled) {
  return pick_adam<Avx2V>(grad, out, l2, decoupled);
}
SumSquaresFn sum_squares_kernel_avx2(DType grad) { return pick_sum_squares<Avx2V>(grad); }
Cast16Fn cast16_kernel_avx2(OutKind out) { return pick_cast16<Avx2V>(out); }

}  // namespace strata::cpu::detail
