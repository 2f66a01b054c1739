// CudaKernels against CpuKernels (the reference) on random inputs, for every dtype:
// matmul, bias_backward, embedding, GELU, add, scale, cast and sum_squares.
#include <limits>

#include "twin.h"

namespace strata::gpu::testing {
namespace {

class CudaVsCpu : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    twin_ = Twin::make();
    if (!twin_) GTEST_SKIP() << "no CUDA GPU";
  }
  DType t() const { return GetParam(); }
  std::unique_ptr<Twin> twin_;
};

struct MatmulCase {
  int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
  bool bias;
  bool c_f32;  // C (and bias) in fp32 instead of the A/B dtype
};

TEST_P(CudaVsCpu, Matmul) {
  Twin& tw = *twin_;
  const MatmulCase cases[] = {
      {37, 53, 71, false, false, 1.0f, 0.0f, true, false},
      {64, 48, 32, true, false, 0.5f, 1.0f, false, false},
      {33, 17, 129, false, true, 1.0f, 0.25f, true, false},
      {16, 24, 64, true, true, -1.0f, 0.0f, false, false},
      {40, 72, 56, false, true, 1.0f, 1.0f, true, true},
  };
  uint64_t seed = 100;
  for (const MatmulCase& mc : cases) {
    const DType tc = mc.c_f32 ? DType::kF32 : t();
    TwinBuf a = tw.random(static_cast<size_t>(mc.m * mc.k), t(), ++seed);
    TwinBuf b = tw.random(static_cast<size_t>(mc.k * mc.n), t(), ++seed);
    TwinBuf bias = tw.random(static_cast<size_t>(mc.n), tc, ++seed);
    TwinBuf c = tw.alloc(static_cast<size_t>(mc.m * mc.n), tc);
    if (mc.beta == 0.0f) {  // beta = 0 must not read C: fill it with NaN
      tw.upload(c, std::vector<float>(c.n, std::numeric_limits<float>::quiet_NaN()));
    } else {
      tw.upload(c, Twin::uniform(c.n, ++seed, -1.0f, 1.0f));
    }
    TWIN_RUN(tw, k.matmul(s, MatmulArgs{P(a), P(b), P(c), mc.bias ? P(bias) : nullptr, t(), tc,
                                        mc.m, mc.n, mc.k, mc.ta, mc.tb, mc.alpha, mc.beta}));
    tw.expect_close("matmul M=" + std::to_string(mc.m) + " N=" + std::to_string(mc.n) +
                        " K=" + std::to_string(mc.k) + " ta=" + std::to_string(mc.ta) +
                        " tb=" + std::to_string(mc.tb),
                    c, tol_for(tc) * 2);
    if (mc.beta == 0.0f) {  // expect_close takes NaN on both sides as a match
      for (float v : tw.download(c, true)) ASSERT_FALSE(std::isnan(v)) << "matmul read C, beta 0";
    }
  }
}

TEST_P(CudaVsCpu, BiasBackward) {
  Twin& tw = *twin_;
  const int64_t m = 300, n = 77;
  TwinBuf dout = tw.random(static_cast<size_t>(m * n), t(), 1);
  for (bool accumulate : {false, true}) {
    TwinBuf dbias = tw.random(static_cast<size_t>(n), t(), 2);
    TWIN_RUN(tw, k.bias_backward(s, P(dbias), P(dout), m, n, t(), accumulate));
    tw.expect_close(accumulate ? "bias_backward accumulate" : "bias_backward", dbias, tol_for(t()));
  }
}

TEST_P(CudaVsCpu, Embedding) {
  Twin& tw = *twin_;
  const int64_t B = 3, T = 17, C = 300, V = 50, Vp = 64, Tmax = 20;
  std::vector<int32_t> tokens(static_cast<size_t>(B * T));
  TestRng rng(5);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(rng.below(i, V));
  TwinBuf tok = tw.alloc(tokens.size(), DType::kF32);  // 4-byte elements hold the int32 ids
  tw.upload_raw(tok, tokens.data(), tokens.size() * sizeof(int32_t));
  TwinBuf wte = tw.random(static_cast<size_t>(Vp * C), t(), 6);
  TwinBuf wpe = tw.random(static_cast<size_t>(Tmax * C), t(), 7);
  TwinBuf out = tw.alloc(static_cast<size_t>(B * T * C), t());
  TWIN_RUN(tw, k.embedding_forward(s, P(out), PI(tok), P(wte), P(wpe), B, T, C, t()));
  tw.expect_close("embedding_forward", out, tol_for(t()));

  TwinBuf dout = tw.random(static_cast<size_t>(B * T * C), t(), 8);
  TwinBuf dwte = tw.random(static_cast<size_t>(Vp * C), t(), 9);
  TwinBuf dwpe = tw.random(static_cast<size_t>(Tmax * C), t(), 10);
  TWIN_RUN(tw, k.embedding_backward(s, P(dwte), P(dwpe), P(dout), PI(tok), B, T, C, t()));
  tw.expect_close("embedding_backward dwte", dwte, tol_for(t()));
  tw.expect_close("embedding_backward dwpe", dwpe, tol_for(t()));
}

TEST_P(CudaVsCpu, Gelu) {
  Twin& tw = *twin_;
  const int64_t n = 10007;
  TwinBuf x = tw.random(static_cast<size_t>(n), t(), 11, -5.0f, 5.0f);
  TwinBuf y = tw.alloc(static_cast<size_t>(n), t());
  TWIN_RUN(tw, k.gelu_forward(s, P(y), P(x), n, t()));
  tw.expect_close("gelu_forward", y, tol_for(t()));
  TwinBuf dy = tw.random(static_cast<size_t>(n), t(), 12);
  TwinBuf dx = tw.alloc(static_cast<size_t>(n), t());
  TWIN_RUN(tw, k.gelu_backward(s, P(dx), P(x), P(dy), n, t()));
  tw.expect_close("gelu_backward", dx, tol_for(t()));
}

TEST_P(CudaVsCpu, AddScaleCast) {
  Twin& tw = *twin_;
  const int64_t n = 4099;
  TwinBuf a = tw.random(static_cast<size_t>(n), t(), 13);
  TwinBuf b = tw.random(static_cast<size_t>(n), t(), 14);
  TWIN_RUN(tw, k.add(s, P(a), P(a), P(b), n, t()));  // out aliases a
  tw.expect_close("add", a, tol_for(t()));
  TWIN_RUN(tw, k.scale(s, P(b), -3.5f, n, t()));
  tw.expect_close("scale", b, tol_for(t()));

  // Values beyond the fp16 range, tiny values, NaN and Inf: casts must agree exactly.
  std::vector<float> v = Twin::uniform(static_cast<size_t>(n), 15, -1.0f, 1.0f);
  for (size_t i = 0; i < v.size(); i += 7) v[i] *= 1e5f;
  for (size_t i = 3; i < v.size(); i += 11) v[i] *= 1e-6f;
  v[1] = std::numeric_limits<float>::quiet_NaN();
  v[2] = std::numeric_limits<float>::infinity();
  v[4] = -std::numeric_limits<float>::infinity();
  for (DType dst : {DType::kF32, DType::kF16, DType::kBF16}) {
    TwinBuf src = tw.alloc(static_cast<size_t>(n), t());
    tw.upload(src, v);
    TwinBuf out = tw.alloc(static_cast<size_t>(n), dst);
    TWIN_RUN(tw, k.cast(s, P(out), dst, P(src), t(), n));
    tw.expect_close(std::string("cast to ") + std::string(dtype_name(dst)), out, 0.0);
  }
}

TEST_P(CudaVsCpu, SumSquares) {
  Twin& tw = *twin_;
  const int64_t n = 100003;
  TwinBuf x = tw.random(static_cast<size_t>(n), t(), 16);
  TwinBuf out = tw.alloc(2, DType::kF32);
  TWIN_RUN(tw, k.sum_squares(s, PF(out), P(x), n, t(), false));
  tw.expect_close("sum_squares", out, 1e-4);
  TWIN_RUN(tw, k.sum_squares(s, PF(out), P(x), n / 2, t(), true));
  tw.expect_close("sum_squares accumulate", out, 1e-4);
  const auto got = tw.download(out, true);
  EXPECT_EQ(got[1], 0.0f);

  std::vector<float> v = Twin::uniform(static_cast<size_t>(n), 17, -1.0f, 1.0f);
  v[n - 5] = std::numeric_limits<float>::infinity();
  tw.upload(x, v);
  TWIN_RUN(tw, k.sum_squares(s, PF(out), P(x), n, t(), false));
  EXPECT_EQ(tw.download(out, true)[1], 1.0f);
  EXPECT_EQ(tw.download(out, false)[1], 1.0f);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, CudaVsCpu,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         dtype_param_name);

}  // namespace
}  // namespace strata::gpu::testing
