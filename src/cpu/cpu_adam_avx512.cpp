// AVX-512 (F, BW, VL, DQ) path of the CPU Adam kernels (16 floats per vector). Built with the
// AVX-512 flags and only called after run-time detection (detect_isa / parse_isa).
#include <immintrin.h>

#include "cpu/cpu_adam_simd.h"

// GCC 12 reports its own intrinsics' _mm512_undefined_*() placeholders as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::cpu::detail {
namespace {

struct Avx512V {
  using F = __m512;
  static constexpr int64_t kWidth = 16;
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static void fence() { _mm_sfence(); }

  template <DType G>
  static F load_grad(const void* g, int64_t i) {
    if constexpr (G == DType::kF32) {
      return _mm512_loadu_ps(static_cast<const float*>(g) + i);
    } else {
      const __m256i h =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(g) + i));
      if constexpr (G == DType::kF16) return _mm512_cvtph_ps(h);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }

  // bf16 round to nearest even by integer ops; NaN keeps its top bits with the quiet bit set.
  static __m256i to_bf16(F x) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
    const __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet));
  }

  template <OutKind O>
  static void store16(void* out, int64_t i, F x, bool stream) {
    __m256i h;
    if constexpr (O == OutKind::kF16) {
      h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      h = to_bf16(x);
    }
    auto* dst = reinterpret_cast<__m256i*>(static_cast<uint16_t*>(out) + i);
    if (stream) {
      _mm256_stream_si256(dst, h);
    } else {
      _mm256_storeu_si256(dst, h);
    }
  }

  struct Acc {
    __m512d lane[2];  // lanes 0-7, 8-15
  };
  static Acc acc_zero() { return Acc{{_mm512_setzero_pd(), _mm512_setzero_pd()}}; }
  template <DType G>
  static void acc_block16(Acc& acc, const void* g, int64_t i) {
    const F x = load_grad<G>(g, i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d hi =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    // The product of two fp32 values is exact in fp64, so the fma rounds once like mul+add.
    acc.lane[0] = _mm512_fmadd_pd(lo, lo, acc.lane[0]);
    acc.lane[1] = _mm512_fmadd_pd(hi, hi, acc.lane[1]);
  }
  static void acc_lanes(const Acc& acc, double out[16]) {
    _mm512_storeu_pd(out, acc.lane[0]);
    _mm512_storeu_pd(out + 8, acc.lane[1]);
  }
};

}  // namespace

AdamChunkFn adam_kernel_avx512(DType grad, OutKind out, bool l2, bool decoupled) {
  return pick_adam<Avx512V>(grad, out, l2, decoupled);
}
SumSquaresFn sum_squares_kernel_avx512(DType grad) { return pick_sum_squares<Avx512V>(grad); }
Cast16Fn cast16_kernel_avx512(OutKind out) { return pick_cast16<Avx512V>(out); }

}  // namespace strata::cpu::detail
