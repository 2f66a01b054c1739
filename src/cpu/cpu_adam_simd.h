// Internal to strata_cpu: the one definition of the Adam / AdamW element math, the copy-out and
// the sum of squares, written once over a vector-traits type V and instantiated by each ISA file
// (cpu_adam_scalar.cpp, cpu_adam_avx2.cpp, cpu_adam_avx512.cpp) with its own V. Every ISA thus
// runs the same operations in the same order; with V::fma a fused multiply-add on every ISA
// (std::fma in the scalar path) and IEEE sqrt / div, all paths give identical bits.
//
// Each ISA file defines V in an anonymous namespace, so these templates get internal linkage per
// file and no code built with one instruction set can be picked up by another (no ODR clash).
//
// V provides: F (vector of kWidth floats), set1, load, store, mul, fma (a*b+c, one rounding),
// sqrt, div, load_grad<DType>(base, i), store16<OutKind>(base, i, x, stream), fence(), and for
// the sum of squares: Acc, acc_zero(), acc_block16<DType>(acc, base, i) (16 elements: element
// j -> lane j), acc_lanes(acc, double[16]).
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu/cpu_adam_kernels.h"

namespace strata::cpu::detail {

template <class V>
struct VConsts {
  typename V::F scale, b1, omb1, b2, omb2, neg_step, inv_bc2, eps, l2, decay;
  explicit VConsts(const AdamConsts& k)
      : scale(V::set1(k.grad_scale)),
        b1(V::set1(k.beta1)),
        omb1(V::set1(k.one_minus_beta1)),
        b2(V::set1(k.beta2)),
        omb2(V::set1(k.one_minus_beta2)),
        neg_step(V::set1(k.neg_step_size)),
        inv_bc2(V::set1(k.inv_sqrt_bc2)),
        eps(V::set1(k.eps)),
        l2(V::set1(k.l2)),
        decay(V::set1(k.decay)) {}
};

// The element math, for kWidth elements at index i:
//   g  = grad * scale
//   g  = fma(l2, p, g)                     (Adam: L2 weight decay)
//   m  = fma(b1, m, (1 - b1) * g)
//   v  = fma(b2, v, ((1 - b2) * g) * g)
//   d  = fma(sqrt(v), 1 / sqrt(1 - b2^t), eps)
//   p  = p * (1 - lr * wd)                 (AdamW: decoupled weight decay)
//   p  = fma(-lr / (1 - b1^t), m / d, p)
template <class V, DType G, OutKind O, bool kL2, bool kDecoupled>
inline void adam_vector(const VConsts<V>& k, float* p, float* m, float* v, const void* g,
                        void* out16, int64_t i, bool stream) {
  using F = typename V::F;
  F gv = V::mul(V::template load_grad<G>(g, i), k.scale);
  F pv = V::load(p + i);
  if constexpr (kL2) gv = V::fma(k.l2, pv, gv);
  const F mv = V::fma(k.b1, V::load(m + i), V::mul(k.omb1, gv));
  const F vv = V::fma(k.b2, V::load(v + i), V::mul(V::mul(k.omb2, gv), gv));
  const F d = V::fma(V::sqrt(vv), k.inv_bc2, k.eps);
  if constexpr (kDecoupled) pv = V::mul(pv, k.decay);
  pv = V::fma(k.neg_step, V::div(mv, d), pv);
  V::store(p + i, pv);
  V::store(m + i, mv);
  V::store(v + i, vv);
  if constexpr (O != OutKind::kNone) V::template store16<O>(out16, i, pv, stream);
}

template <class V, DType G, OutKind O, bool kL2, bool kDecoupled>
void adam_chunk(const AdamConsts& consts, float* p, float* m, float* v, const void* g, void* out16,
                int64_t n, bool stream) {
  constexpr int64_t kW = V::kWidth;
  const VConsts<V> k(consts);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    adam_vector<V, G, O, kL2, kDecoupled>(k, p, m, v, g, out16, i, stream);
  }
  if constexpr (kW > 1) {
    const int64_t rest = n - i;
    if (rest > 0) {
      // Zero-padded copies of the tail, one vector step, copy the live lanes back.
      alignas(64) float tp[kW] = {}, tm[kW] = {}, tv[kW] = {};
      alignas(64) unsigned char tg[kW * 4] = {};
      alignas(64) uint16_t to[kW] = {};
      constexpr size_t gsize = dtype_size(G);
      std::memcpy(tp, p + i, rest * sizeof(float));
      std::memcpy(tm, m + i, rest * sizeof(float));
      std::memcpy(tv, v + i, rest * sizeof(float));
      std::memcpy(tg, static_cast<const unsigned char*>(g) + i * gsize, rest * gsize);
      adam_vector<V, G, O, kL2, kDecoupled>(k, tp, tm, tv, tg, to, 0, false);
      std::memcpy(p + i, tp, rest * sizeof(float));
      std::memcpy(m + i, tm, rest * sizeof(float));
      std::memcpy(v + i, tv, rest * sizeof(float));
      if constexpr (O != OutKind::kNone) {
        std::memcpy(static_cast<uint16_t*>(out16) + i, to, rest * sizeof(uint16_t));
      }
    }
  }
  if constexpr (O != OutKind::kNone) {
    if (stream) V::fence();
  }
}

template <class V, OutKind O>
void cast16_chunk(const float* src, void* dst, int64_t n, bool stream) {
  constexpr int64_t kW = V::kWidth;
  int64_t i = 0;
  for (; i + kW <= n; i += kW) V::template store16<O>(dst, i, V::load(src + i), stream);
  if constexpr (kW > 1) {
    const int64_t rest = n - i;
    if (rest > 0) {
      alignas(64) float ts[kW] = {};
      alignas(64) uint16_t td[kW] = {};
      std::memcpy(ts, src + i, rest * sizeof(float));
      V::template store16<O>(td, 0, V::load(ts), false);
      std::memcpy(static_cast<uint16_t*>(dst) + i, td, rest * sizeof(uint16_t));
    }
  }
  if (stream) V::fence();
}

template <class V, DType G>
double sum_squares_chunk(const void* g, int64_t n) {
  typename V::Acc acc = V::acc_zero();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) V::template acc_block16<G>(acc, g, i);
  const int64_t rest = n - i;
  if (rest > 0) {
    // Zero padding adds +0 to the lanes, which leaves them unchanged.
    alignas(64) unsigned char tg[16 * 4] = {};
    constexpr size_t gsize = dtype_size(G);
    std::memcpy(tg, static_cast<const unsigned char*>(g) + i * gsize, rest * gsize);
    V::template acc_block16<G>(acc, tg, 0);
  }
  double lanes[16];
  V::acc_lanes(acc, lanes);
  double sum = 0.0;
  for (double lane : lanes) sum += lane;
  return sum;
}

// Kernel selection over the template parameters.
template <class V, DType G, OutKind O>
AdamChunkFn pick_adam_mode(bool l2, bool decoupled) {
  if (l2) {
    return decoupled ? &adam_chunk<V, G, O, true, true> : &adam_chunk<V, G, O, true, false>;
  }
  return decoupled ? &adam_chunk<V, G, O, false, true> : &adam_chunk<V, G, O, false, false>;
}

template <class V, DType G>
AdamChunkFn pick_adam_out(OutKind out, bool l2, bool decoupled) {
  switch (out) {
    case OutKind::kNone: return pick_adam_mode<V, G, OutKind::kNone>(l2, decoupled);
    case OutKind::kF16: return pick_adam_mode<V, G, OutKind::kF16>(l2, decoupled);
    case OutKind::kBF16: return pick_adam_mode<V, G, OutKind::kBF16>(l2, decoupled);
  }
  return nullptr;
}

template <class V>
AdamChunkFn pick_adam(DType grad, OutKind out, bool l2, bool decoupled) {
  switch (grad) {
    case DType::kF32: return pick_adam_out<V, DType::kF32>(out, l2, decoupled);
    case DType::kF16: return pick_adam_out<V, DType::kF16>(out, l2, decoupled);
    case DType::kBF16: return pick_adam_out<V, DType::kBF16>(out, l2, decoupled);
  }
  return nullptr;
}

template <class V>
SumSquaresFn pick_sum_squares(DType grad) {
  switch (grad) {
    case DType::kF32: return &sum_squares_chunk<V, DType::kF32>;
    case DType::kF16: return &sum_squares_chunk<V, DType::kF16>;
    case DType::kBF16: return &sum_squares_chunk<V, DType::kBF16>;
  }
  return nullptr;
}

template <class V>
Cast16Fn pick_cast16(OutKind out) {
  switch (out) {
    case OutKind::kF16: return &cast16_chunk<V, OutKind::kF16>;
    case OutKind::kBF16: return &cast16_chunk<V, OutKind::kBF16>;
    case OutKind::kNone: break;
  }
  return nullptr;
}

}  // namespace strata::cpu::detail
