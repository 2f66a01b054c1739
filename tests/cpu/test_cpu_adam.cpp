// CpuAdam against the independent float64 reference (adam_reference.h) on fresh random inputs:
// every size / gradient dtype / output dtype / decay mode / ISA path, 50 successive steps, and
// identical bits across ISA paths and thread counts.
#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
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

using testing::bound_ratio;
using testing::RefHyper;
using testing::RefState;
using testing::test_seed;

const int64_t kSizes[] = {0, 1, 15, 17, 4097, 1000003};
const DType kGradTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
// nullopt-like: kF32 below stands for "no out16".
const DType kOutTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

std::vector<Isa> available_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(detect_isa())) isas.push_back(isa);
  }
  return isas;
}

// Optimizer state plus a gradient buffer and a 16-bit output.
struct State {
  std::vector<float> p, m, v;
  std::vector<unsigned char> g;
  std::vector<uint16_t> out;
  DType grad_dtype = DType::kF32;
  DType out_dtype = DType::kF32;  // kF32: no out16

  State(int64_t n, DType gd, DType od)
      : p(n), m(n), v(n), g(n * dtype_size(gd)), out(n), grad_dtype(gd), out_dtype(od) {}
  int64_t numel() const { return static_cast<int64_t>(p.size()); }
  double grad(int64_t i) const { return load_as_f32(g.data(), grad_dtype, i); }
  AdamBuffers buffers() {
    AdamBuffers b;
    b.params = p.data();
    b.exp_avg = m.data();
    b.exp_avg_sq = v.data();
    b.grads = g.data();
    b.grad_dtype = grad_dtype;
    b.out16 = out_dtype == DType::kF32 ? nullptr : out.data();
    b.out_dtype = out_dtype == DType::kF32 ? DType::kBF16 : out_dtype;
    b.numel = numel();
    return b;
  }
};

// Values spread over many binades (with zeros), as optimizer state and gradients are.
float spread(const CounterRng& rng, uint64_t i, int lo_exp, int hi_exp) {
  if (rng.below(4 * i + 3, 61) == 0) return 0.0f;
  const int e = lo_exp + static_cast<int>(rng.below(4 * i + 2, hi_exp - lo_exp + 1));
  // Uniform in (-2, 2) with 24 random bits, scaled by 2^e.
  const float u = 4.0f * rng.uniform(4 * i) - 2.0f;
  return std::ldexp(u, e);
}

void fill_grads(State& s, uint64_t stream) {
  const CounterRng rng(test_seed(), stream);
  for (int64_t i = 0; i < s.numel(); ++i) {
    store_from_f32(s.g.data(), s.grad_dtype, i, spread(rng, i, -14, 3));
  }
}

void fill_state(State& s, uint64_t stream, bool zero_moments) {
  const CounterRng rng(test_seed(), stream);
  for (int64_t i = 0; i < s.numel(); ++i) {
    s.p[i] = spread(rng, 3 * i, -6, 1);
    s.m[i] = zero_moments ? 0.0f : spread(rng, 3 * i + 1, -12, -2);
    const float r = zero_moments ? 0.0f : spread(rng, 3 * i + 2, -10, -3);
    s.v[i] = r * r;
  }
  fill_grads(s, stream + 1000);
}

RefHyper ref_hyper(const AdamHyper& h) {
  return {
      h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.mode == AdamMode::kAdamW, h.bias_correction};
}

// Checks `after` against one reference step from `before`; returns the largest |err| / bound.
double expect_matches_reference(const State& before, const State& after, const AdamHyper& h,
                                const AdamStep& st) {
  const RefHyper rh = ref_hyper(h);
  const testing::RefBias bias = testing::reference_bias(rh, st.step);
  double worst = 0.0;
  int64_t failures = 0;
  for (int64_t i = 0; i < before.numel(); ++i) {
    const RefState r = testing::reference_step(rh, bias, st.grad_scale, before.p[i], before.m[i],
                                               before.v[i], before.grad(i));
    const double rp = bound_ratio(after.p[i], r.p);
    const double rm = bound_ratio(after.m[i], r.m);
    const double rv = bound_ratio(after.v[i], r.v);
    worst = std::max({worst, rp, rm, rv});
    if ((rp > 1.0 || rm > 1.0 || rv > 1.0) && ++failures <= 5) {
      ADD_FAILURE() << "element " << i << " of " << before.numel() << ": p " << after.p[i]
                    << " want " << r.p.x << " +- " << r.p.e << "; m " << after.m[i] << " want "
                    << r.m.x << " +- " << r.m.e << "; v " << after.v[i] << " want " << r.v.x
                    << " +- " << r.v.e << " (grad " << before.grad(i) << ", p " << before.p[i]
                    << ", m " << before.m[i] << ", v " << before.v[i] << ")";
    }
    if (after.out_dtype != DType::kF32) {
      const uint16_t want =
          after.out_dtype == DType::kF16 ? f32_to_f16(after.p[i]) : f32_to_bf16(after.p[i]);
      if (after.out[i] != want && ++failures <= 5) {
        ADD_FAILURE() << "out16[" << i << "] " << after.out[i] << " is not the rounded param "
                      << want;
      }
    }
  }
  EXPECT_EQ(failures, 0);
  return worst;
}

// memcmp of n bytes; n == 0 is equal (memcmp must not be given the null data() of an empty
// vector).
bool bytes_equal(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

bool same_bits(const State& a, const State& b) {
  const size_t n = a.p.size() * sizeof(float);
  return bytes_equal(a.p.data(), b.p.data(), n) && bytes_equal(a.m.data(), b.m.data(), n) &&
         bytes_equal(a.v.data(), b.v.data(), n) &&
         (a.out_dtype == DType::kF32 || bytes_equal(a.out.data(), b.out.data(), a.out.size() * 2));
}

AdamHyper test_hyper(AdamMode mode) {
  AdamHyper h;
  h.lr = 3e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.995f;
  h.eps = 1e-8f;
  h.weight_decay = 0.02f;
  h.mode = mode;
  return h;
}

TEST(CpuAdam, MatchesReferenceForEverySizeDtypeModeAndIsa) {
  std::cout << "seed " << test_seed() << " (set STRATA_TEST_SEED to replay)\n";
  double worst = 0.0;
  uint64_t stream = 0;
  for (int64_t n : kSizes) {
    for (DType gd : kGradTypes) {
      for (DType od : kOutTypes) {
        for (AdamMode mode : {AdamMode::kAdam, AdamMode::kAdamW}) {
          SCOPED_TRACE(::testing::Message()
                       << "seed " << test_seed() << " n " << n << " grad " << dtype_name(gd)
                       << " out " << (od == DType::kF32 ? "none" : dtype_name(od)) << " mode "
                       << (mode == AdamMode::kAdam ? "adam" : "adamw"));
          State before(n, gd, od);
          fill_state(before, stream += 7, false);
          const AdamHyper h = test_hyper(mode);
          const AdamStep st{static_cast<int64_t>(1 + stream % 40), 0.37f};
          std::vector<State> results;
          for (Isa isa : available_isas()) {
            State s = before;
            ASSERT_TRUE(CpuAdam(h, {.isa = isa}).step(s.buffers(), st).ok());
            results.push_back(std::move(s));
          }
          worst = std::max(worst, expect_matches_reference(before, results[0], h, st));
          for (size_t k = 1; k < results.size(); ++k) {
            EXPECT_TRUE(same_bits(results[0], results[k]))
                << isa_name(available_isas()[k]) << " differs from scalar";
          }
        }
      }
    }
  }
  std::cout << "largest error / bound: " << worst << "\n";
}

TEST(CpuAdam, FiftyStepsFollowBiasCorrection) {
  for (bool bias_correction : {true, false}) {
    for (AdamMode mode : {AdamMode::kAdam, AdamMode::kAdamW}) {
      for (int64_t n : {int64_t{17}, int64_t{4097}}) {
        SCOPED_TRACE(::testing::Message() << "seed " << test_seed() << " n " << n << " mode "
                                          << static_cast<int>(mode) << " bc " << bias_correction);
        AdamHyper h = test_hyper(mode);
        h.bias_correction = bias_correction;
        std::vector<State> states;
        State init(n, DType::kBF16, DType::kBF16);
        fill_state(init, 500 + n, /*zero_moments=*/true);
        for (size_t k = 0; k < available_isas().size(); ++k) states.push_back(init);
        for (int64_t t = 1; t <= 50; ++t) {
          const State before = states[0];
          const AdamStep st{t, 1.0f / 64};
          for (size_t k = 0; k < states.size(); ++k) {
            fill_grads(states[k], 7000 + 100 * t + n);
            ASSERT_TRUE(
                CpuAdam(h, {.isa = available_isas()[k]}).step(states[k].buffers(), st).ok());
          }
          State with_grads = before;
          with_grads.g = states[0].g;
          expect_matches_reference(with_grads, states[0], h, st);
          for (size_t k = 1; k < states.size(); ++k) {
            ASSERT_TRUE(same_bits(states[0], states[k])) << "step " << t;
          }
        }
      }
    }
  }
}

TEST(CpuAdam, ThreadCountsGiveIdenticalBits) {
  const int64_t n = 1000003;
  // Let arenas of up to 4 threads get their workers even on a 2-core machine.
  const tbb::global_control allow(tbb::global_control::max_allowed_parallelism, 4);
  for (int64_t chunk : {int64_t{1024}, int64_t{1} << 16}) {
    State init(n, DType::kF16, DType::kBF16);
    fill_state(init, 900, false);
    std::vector<State> results;
    std::vector<double> sums;
    for (int threads : {1, 2, 4}) {
      State s = init;
      double sum = 0.0;
      tbb::task_arena arena(threads);
      arena.execute([&] {
        const AdamHyper h = test_hyper(AdamMode::kAdamW);
        ASSERT_TRUE(CpuAdam(h, {.chunk_numel = chunk}).step(s.buffers(), {3, 0.5f}).ok());
        sum = grad_check(s.g.data(), s.grad_dtype, n, 0.5f, detect_isa(), chunk).sum_squares;
      });
      results.push_back(std::move(s));
      sums.push_back(sum);
    }
    for (size_t k = 1; k < results.size(); ++k) {
      EXPECT_TRUE(same_bits(results[0], results[k])) << "chunk " << chunk << " run " << k;
      EXPECT_EQ(std::memcmp(&sums[0], &sums[k], sizeof(double)), 0);
    }
  }
}

TEST(CpuAdam, CastParams16MatchesScalarConversion) {
  for (int64_t n : kSizes) {
    std::vector<float> p(n);
    const CounterRng rng(test_seed(), 4242);
    for (int64_t i = 0; i < n; ++i) p[i] = std::bit_cast<float>(static_cast<uint32_t>(rng.bits(i)));
    for (DType od : {DType::kF16, DType::kBF16}) {
      for (Isa isa : available_isas()) {
        for (bool stream : {false, true}) {
          std::vector<uint16_t> out(n + 16);  // +16: an unaligned start for the stream path
          uint16_t* dst = out.data() + (stream ? 0 : 1);
          ASSERT_TRUE(
              cast_params_16(p.data(), dst, od, n, {.isa = isa, .stream_out16 = stream}).ok());
          for (int64_t i = 0; i < n; ++i) {
            const uint16_t want = od == DType::kF16 ? f32_to_f16(p[i]) : f32_to_bf16(p[i]);
            const float got_f = load_as_f32(dst, od, i);
            if (std::isnan(p[i])) {
              ASSERT_TRUE(std::isnan(got_f)) << i;
            } else {
              ASSERT_EQ(dst[i], want) << "n " << n << " i " << i << " isa " << isa_name(isa);
            }
          }
        }
      }
    }
  }
}

TEST(CpuAdam, RejectsBadInput) {
  State s(64, DType::kF32, DType::kBF16);
  const CpuAdam adam(test_hyper(AdamMode::kAdamW));
  AdamBuffers b = s.buffers();
  b.grads = nullptr;
  EXPECT_EQ(adam.step(b, {}).code(), ErrorCode::kConfig);
  b = s.buffers();
  b.out_dtype = DType::kF32;
  EXPECT_EQ(adam.step(b, {}).code(), ErrorCode::kConfig);
  b = s.buffers();
  b.numel = -1;
  EXPECT_EQ(adam.step(b, {}).code(), ErrorCode::kConfig);
  EXPECT_EQ(adam.step(s.buffers(), {0, 1.0f}).code(), ErrorCode::kConfig);
  EXPECT_EQ(adam.step(s.buffers(), {1, NAN}).code(), ErrorCode::kConfig);
  EXPECT_EQ(CpuAdam(test_hyper(AdamMode::kAdam), {.chunk_numel = 100}).step(s.buffers(), {}).code(),
            ErrorCode::kConfig);
  AdamHyper bad = test_hyper(AdamMode::kAdam);
  bad.beta2 = 1.0f;
  EXPECT_EQ(CpuAdam(bad).step(s.buffers(), {}).code(), ErrorCode::kConfig);
  bad = test_hyper(AdamMode::kAdam);
  bad.eps = 0.0f;
  EXPECT_EQ(CpuAdam(bad).step(s.buffers(), {}).code(), ErrorCode::kConfig);
  if (detect_isa() != Isa::kAvx512) {
    EXPECT_EQ(
        CpuAdam(test_hyper(AdamMode::kAdam), {.isa = Isa::kAvx512}).step(s.buffers(), {}).code(),
        ErrorCode::kUnsupported);
  }
  // numel 0 accepts null pointers.
  AdamBuffers empty;
  EXPECT_TRUE(adam.step(empty, {}).ok());
}

}  // namespace
}  // namespace strata::cpu
