// Memory-only pass with the fused CPU Adam byte pattern (memory_floor.h). The vector paths use
// per-function target attributes and are only called when detect_isa() allows them.
#include "memory_floor.h"

#include <immintrin.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <cstring>

// GCC 12 reports its own intrinsics' _mm512_undefined_*() placeholders as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::bench {
namespace {

// Plain loop: the tail of the vector paths, and the floor on CPUs without AVX2.
template <int kGradBytes, bool kOut>
void floor_tail(const FloorBuffers& b, int64_t begin, int64_t n) {
  for (int64_t i = begin; i < begin + n; ++i) {
    float g;
    if constexpr (kGradBytes == 4) {
      g = static_cast<const float*>(b.grads)[i];
    } else {
      const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(b.grads)[i]) << 16;
      std::memcpy(&g, &bits, 4);
    }
    b.params[i] += g;
    b.exp_avg[i] += g;
    b.exp_avg_sq[i] += b.params[i];
    if constexpr (kOut) {
      uint32_t bits;
      std::memcpy(&bits, &b.params[i], 4);
      b.out16[i] = static_cast<uint16_t>(bits >> 16);
    }
  }
}

// p += g; m += g; v += p; out16 = top half of p. Loads and stores are exactly those of Adam.
template <int kGradBytes, bool kOut>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void floor_avx512(const FloorBuffers& b,
                                                                       int64_t begin, int64_t n,
                                                                       bool stream) {
  float* p = b.params + begin;
  float* m = b.exp_avg + begin;
  float* v = b.exp_avg_sq + begin;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 g;
    if constexpr (kGradBytes == 4) {
      g = _mm512_loadu_ps(static_cast<const float*>(b.grads) + begin + i);
    } else {
      const __m256i h = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(b.grads) + begin + i));
      g = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    const __m512 pv = _mm512_add_ps(_mm512_loadu_ps(p + i), g);
    _mm512_storeu_ps(p + i, pv);
    _mm512_storeu_ps(m + i, _mm512_add_ps(_mm512_loadu_ps(m + i), g));
    _mm512_storeu_ps(v + i, _mm512_add_ps(_mm512_loadu_ps(v + i), pv));
    if constexpr (kOut) {
      const __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(pv), 16));
      auto* dst = reinterpret_cast<__m256i*>(b.out16 + begin + i);
      if (stream) {
        _mm256_stream_si256(dst, h);
      } else {
        _mm256_storeu_si256(dst, h);
      }
    }
  }
  floor_tail<kGradBytes, kOut>(b, begin + i, n - i);
  if (kOut && stream) _mm_sfence();
}

template <int kGradBytes, bool kOut>
__attribute__((target("avx2,fma,f16c"))) void floor_avx2(const FloorBuffers& b, int64_t begin,
                                                         int64_t n, bool stream) {
  float* p = b.params + begin;
  float* m = b.exp_avg + begin;
  float* v = b.exp_avg_sq + begin;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g;
    if constexpr (kGradBytes == 4) {
      g = _mm256_loadu_ps(static_cast<const float*>(b.grads) + begin + i);
    } else {
      const __m128i h = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(b.grads) + begin + i));
      g = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    const __m256 pv = _mm256_add_ps(_mm256_loadu_ps(p + i), g);
    _mm256_storeu_ps(p + i, pv);
    _mm256_storeu_ps(m + i, _mm256_add_ps(_mm256_loadu_ps(m + i), g));
    _mm256_storeu_ps(v + i, _mm256_add_ps(_mm256_loadu_ps(v + i), pv));
    if constexpr (kOut) {
      const __m256i t = _mm256_srli_epi32(_mm256_castps_si256(pv), 16);
      const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
      auto* dst = reinterpret_cast<__m128i*>(b.out16 + begin + i);
      if (stream) {
        _mm_stream_si128(dst, h);
      } else {
        _mm_storeu_si128(dst, h);
      }
    }
  }
  floor_tail<kGradBytes, kOut>(b, begin + i, n - i);
  if (kOut && stream) _mm_sfence();
}

template <int kGradBytes, bool kOut>
void floor_chunk(const FloorBuffers& b, cpu::Isa isa, int64_t begin, int64_t n, bool stream) {
  if (isa == cpu::Isa::kAvx512) {
    floor_avx512<kGradBytes, kOut>(b, begin, n, stream);
  } else if (isa == cpu::Isa::kAvx2) {
    floor_avx2<kGradBytes, kOut>(b, begin, n, stream);
  } else {
    floor_tail<kGradBytes, kOut>(b, begin, n);
  }
}

}  // namespace

void memory_floor(const FloorBuffers& b, cpu::Isa isa, int64_t chunk_numel, bool stream) {
  const int64_t num_chunks = (b.numel + chunk_numel - 1) / chunk_numel;
  stream = stream && b.out16 != nullptr && reinterpret_cast<uintptr_t>(b.out16) % 32 == 0;
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, num_chunks, 1),
      [&](const tbb::blocked_range<int64_t>& r) {
        for (int64_t c = r.begin(); c != r.end(); ++c) {
          const int64_t begin = c * chunk_numel;
          const int64_t n = std::min(chunk_numel, b.numel - begin);
          if (b.grad_bytes == 4) {
            if (b.out16) {
              floor_chunk<4, true>(b, isa, begin, n, stream);
            } else {
              floor_chunk<4, false>(b, isa, begin, n, stream);
            }
          } else if (b.out16) {
            floor_chunk<2, true>(b, isa, begin, n, stream);
          } else {
            floor_chunk<2, false>(b, isa, begin, n, stream);
          }
        }
      },
      tbb::simple_partitioner());
}

}  // namespace strata::bench
