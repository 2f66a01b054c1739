// Kernel conformance, part 1: matmul, bias_backward, add, scale, cast, gelu, sum_squares,
// argument errors and determinism, against the float64 reference (kernel_reference.h).
#include "kernel_test_util.h"

namespace strata::gpu::test {
namespace {

struct MatmulCase {
  int64_t m, n, k;
};

void run_matmul(KernelTest& t, DeviceFixture& d, DType ab, DType c_dtype, MatmulCase mc, bool ta,
                bool tb, bool with_bias, double alpha, double beta, double tol) {
  Vec a = random_vec(mc.m * mc.k, 1), b = random_vec(mc.k * mc.n, 2);
  Vec c = random_vec(mc.m * mc.n, 3), bias = with_bias ? random_vec(mc.n, 4) : Vec{};
  auto da = d.upload(a, ab);
  auto db = d.upload(b, ab);
  auto dc = d.upload(c, c_dtype);
  DeviceBuffer dbias;
  if (with_bias) dbias = d.upload(bias, c_dtype);
  MatmulArgs args;
  args.a = da.data();
  args.b = db.data();
  args.c = dc.data();
  args.bias = with_bias ? dbias.data() : nullptr;
  args.dtype_ab = ab;
  args.dtype_c = c_dtype;
  args.m = mc.m;
  args.n = mc.n;
  args.k = mc.k;
  args.trans_a = ta;
  args.trans_b = tb;
  args.alpha = static_cast<float>(alpha);
  args.beta = static_cast<float>(beta);
  ASSERT_TRUE(d.k().matmul(d.stream(), args).ok());
  ref::matmul(a, b, c, bias, mc.m, mc.n, mc.k, ta, tb, alpha, beta);
  expect_close(d.download(dc, c.size(), c_dtype), c, tol,
               "matmul " + std::to_string(mc.m) + "x" + std::to_string(mc.n) + "x" +
                   std::to_string(mc.k) + (ta ? " ta" : "") + (tb ? " tb" : "") +
                   (with_bias ? " bias" : "") + " beta " + std::to_string(beta));
  (void)t;
}

TEST_P(KernelTest, MatmulAllTransposesSmallOddShapes) {
  for (MatmulCase mc : {MatmulCase{1, 1, 1}, MatmulCase{7, 13, 5}, MatmulCase{33, 17, 129}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (bool bias : {false, true}) {
          run_matmul(*this, d_, dt(), dt(), mc, ta, tb, bias, 1.0, 0.0, tol());
          run_matmul(*this, d_, dt(), dt(), mc, ta, tb, bias, 0.7, 0.5, tol());
        }
      }
    }
  }
}

TEST_P(KernelTest, MatmulLargerThanOneTile) {
  // Crosses the CPU tiling (64 rows x 512 columns) in both directions.
  run_matmul(*this, d_, dt(), dt(), {130, 600, 70}, false, false, true, 1.0, 0.0, tol());
  run_matmul(*this, d_, dt(), dt(), {130, 600, 70}, true, true, false, 1.0, 1.0, tol());
}

TEST_P(KernelTest, MatmulFp32OutputFrom16BitInputs) {
  // The gradient-accumulation pattern: 16-bit operands, fp32 C accumulated with beta = 1.
  run_matmul(*this, d_, dt(), DType::kF32, {19, 23, 31}, true, false, false, 1.0, 1.0, 1e-5);
}

// kernels.h: matmul accumulates in fp32. A long reduction whose partial sums are large and
// cancel: every product is exact in 16 bits and every partial sum in fp32 (multiples of 2^-7
// below 2^12), so fp32 accumulation gives the exact total (8192 / 3 terms of 2^-7, about
// 21.3), while partial sums of a split reduction rounded to 16 bits (about 2048 each, a bf16
// step of 16) would miss it by several units (cuBLASLt may split K; its reduction must then be
// in fp32: the reduction-scheme preference of cuda_matmul.cpp).
TEST_P(KernelTest, MatmulLongCancellingReductionAccumulatesInFp32) {
  const int64_t m = 16, n = 16, k = 8192;
  Vec a(m * k, 1.0), b(k * n), c(m * n, 0.0);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      b[i * n + j] = (i < k / 2 ? 1.0 : -1.0) + (i % 3 == 0 ? 1.0 / 128.0 : 0.0);
    }
  }
  auto da = d_.upload(a, dt());
  auto db = d_.upload(b, dt());
  auto dc = d_.upload(c, dt());
  MatmulArgs args;
  args.a = da.data();
  args.b = db.data();
  args.c = dc.data();
  args.dtype_ab = dt();
  args.dtype_c = dt();
  args.m = m;
  args.n = n;
  args.k = k;
  ASSERT_TRUE(d_.k().matmul(d_.stream(), args).ok());
  ref::matmul(a, b, c, Vec{}, m, n, k, false, false, 1.0, 0.0);
  ASSERT_NEAR(c[0], 2731.0 / 128.0, 1e-9);  // the reference itself
  expect_close(d_.download(dc, c.size(), dt()), c, tol(), "matmul k=8192, cancelling");
}

// Shapes that the CUDA backend cuts into row chunks (3 chunks; 63 chunks, the last short).
TEST_P(KernelTest, BiasBackward) {
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{37, 70}, {1000, 33}}) {
    for (bool accumulate : {false, true}) {
      Vec dout = random_vec(m * n, 5), dbias = random_vec(n, 6);
      auto ddout = d_.upload(dout, dt());
      auto ddbias = d_.upload(dbias, dt());
      ASSERT_TRUE(
          d_.k()
              .bias_backward(d_.stream(), ddbias.data(), ddout.data(), m, n, dt(), accumulate)
              .ok());
      Vec expect(n, 0.0);
      for (int64_t j = 0; j < n; ++j) {
        expect[j] = accumulate ? dbias[j] : 0.0;
        for (int64_t i = 0; i < m; ++i) expect[j] += dout[i * n + j];
      }
      expect_close(d_.download(ddbias, n, dt()), expect, tol(),
                   accumulate ? "bias_backward accumulate" : "bias_backward");
    }
  }
}

TEST_P(KernelTest, AddScaleAndAliasing) {
  const int64_t n = 10007;  // more than one chunk, not a multiple of anything
  Vec a = random_vec(n, 7), b = random_vec(n, 8);
  auto da = d_.upload(a, dt());
  auto db = d_.upload(b, dt());
  auto dout = d_.zeros(n * dtype_size(dt()));
  ASSERT_TRUE(d_.k().add(d_.stream(), dout.data(), da.data(), db.data(), n, dt()).ok());
  Vec sum(n);
  for (int64_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
  expect_close(d_.download(dout, n, dt()), sum, tol(), "add");
  // out aliases a.
  ASSERT_TRUE(d_.k().add(d_.stream(), da.data(), da.data(), db.data(), n, dt()).ok());
  expect_close(d_.download(da, n, dt()), sum, tol(), "add aliased");
  ASSERT_TRUE(d_.k().scale(d_.stream(), db.data(), -0.375f, n, dt()).ok());
  Vec scaled(n);
  for (int64_t i = 0; i < n; ++i) scaled[i] = b[i] * -0.375;
  expect_close(d_.download(db, n, dt()), scaled, tol(), "scale");
}

TEST_P(KernelTest, CastToEveryDtype) {
  const int64_t n = 5003;
  Vec src = random_vec(n, 9, -70000.0, 70000.0);  // beyond fp16's range: must become +-Inf
  for (int i = 0; i < 50; ++i) src[i] = std::ldexp(src[i] / 70000.0, -20);  // fp16 subnormals
  auto dsrc = d_.upload(src, dt());
  for (DType to : {DType::kF32, DType::kF16, DType::kBF16}) {
    auto ddst = d_.zeros(n * dtype_size(to));
    ASSERT_TRUE(d_.k().cast(d_.stream(), ddst.data(), to, dsrc.data(), dt(), n).ok());
    const Vec got = d_.download(ddst, n, to);
    int mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      // Exact: cast is one round-to-nearest-even of an exactly representable input.
      const double want = round_to(to, src[i]);
      if (!(got[i] == want)) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0) << "cast " << dtype_name(dt()) << " -> " << dtype_name(to);
    // From one element in (no longer 16-byte aligned: the element-by-element path).
    ASSERT_TRUE(d_.k()
                    .cast(d_.stream(), ddst.data(), to,
                          static_cast<const char*>(dsrc.data()) + dtype_size(dt()), dt(), n - 1)
                    .ok());
    const Vec shifted = d_.download(ddst, n - 1, to);
    mismatches = 0;
    for (int64_t i = 0; i + 1 < n; ++i)
      mismatches += shifted[i] == round_to(to, src[i + 1]) ? 0 : 1;
    EXPECT_EQ(mismatches, 0) << "unaligned cast " << dtype_name(dt()) << " -> " << dtype_name(to);
  }
}

TEST_P(KernelTest, GeluForwardBackward) {
  const int64_t n = 9001;
  Vec x = random_vec(n, 10, -6.0, 6.0), g = random_vec(n, 11);
  auto dx = d_.upload(x, dt());
  auto dg = d_.upload(g, dt());
  auto dy = d_.zeros(n * dtype_size(dt()));
  auto ddx = d_.zeros(n * dtype_size(dt()));
  ASSERT_TRUE(d_.k().gelu_forward(d_.stream(), dy.data(), dx.data(), n, dt()).ok());
  ASSERT_TRUE(d_.k().gelu_backward(d_.stream(), ddx.data(), dx.data(), dg.data(), n, dt()).ok());
  Vec y(n), gx(n);
  for (int64_t i = 0; i < n; ++i) {
    y[i] = ref::gelu(x[i]);
    gx[i] = ref::gelu_grad(x[i]) * g[i];
  }
  expect_close(d_.download(dy, n, dt()), y, tol(), "gelu_forward");
  expect_close(d_.download(ddx, n, dt()), gx, tol(), "gelu_backward");
}

TEST_P(KernelTest, SumSquaresAndNonFiniteFlag) {
  const int64_t n = 40000;  // several chunks
  Vec x = random_vec(n, 12);
  auto dx = d_.upload(x, dt());
  auto dout = d_.zeros(8);
  ASSERT_TRUE(d_.k().sum_squares(d_.stream(), dout.as<float>(), dx.data(), n, dt(), false).ok());
  double ss = 0.0;
  for (double v : x) ss += v * v;
  Vec got = d_.download(dout, 2, DType::kF32);
  expect_close({got[0]}, {ss}, 1e-5, "sum_squares");
  EXPECT_EQ(got[1], 0.0);
  // Accumulate a second tensor holding an Inf: the sum adds, the flag turns on.
  Vec y = random_vec(1000, 13);
  y[517] = INFINITY;
  auto dy = d_.upload(y, dt());
  ASSERT_TRUE(d_.k()
                  .sum_squares(d_.stream(), dout.as<float>(), dy.data(), 999 - 500, dt(), true)
                  .ok());  // the first 499 elements: finite
  got = d_.download(dout, 2, DType::kF32);
  double ss2 = ss;
  for (int i = 0; i < 499; ++i) ss2 += y[i] * y[i];
  expect_close({got[0]}, {ss2}, 1e-5, "sum_squares accumulate");
  EXPECT_EQ(got[1], 0.0);
  ASSERT_TRUE(d_.k().sum_squares(d_.stream(), dout.as<float>(), dy.data(), 1000, dt(), true).ok());
  got = d_.download(dout, 2, DType::kF32);
  EXPECT_EQ(got[1], 1.0);
  // NaN alone, not accumulating: flag set.
  y[517] = NAN;
  auto dz = d_.upload(y, dt());
  ASSERT_TRUE(d_.k().sum_squares(d_.stream(), dout.as<float>(), dz.data(), 1000, dt(), false).ok());
  EXPECT_EQ(d_.download(dout, 2, DType::kF32)[1], 1.0);
}

// The documented order of grad_stats (and cpu::grad_check), written out in fp64: chunks of 65536
// elements, element i of a chunk into lane i % 16, the lanes then the chunks added in order.
double chunked_sum_squares(const Vec& x, int64_t n) {
  constexpr int64_t kChunk = 65536;
  double total = 0.0;
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    double lane[16] = {};
    for (int64_t i = c0; i < std::min(n, c0 + kChunk); ++i) lane[(i - c0) % 16] += x[i] * x[i];
    double chunk = 0.0;
    for (double l : lane) chunk += l;
    total += chunk;
  }
  return total;
}

TEST_P(KernelTest, GradStatsHaveTheBitsOfTheHostCheck) {
  const int64_t big = 2 * 65536 + 1001;  // two whole chunks and a partial one
  Vec x = random_vec(static_cast<size_t>(big), 21);
  // Magnitudes apart, so that another order of the sums gives other bits.
  for (size_t i = 0; i < x.size(); i += 7) x[i] *= 1e3;
  for (size_t i = 3; i < x.size(); i += 13) x[i] *= 1e-4;
  auto dx = d_.upload(x, dt());
  auto dout = d_.zeros(2 * sizeof(double));
  for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{65536}, int64_t{65536 + 17}, big}) {
    ASSERT_TRUE(d_.k().grad_stats(d_.stream(), dout.as<double>(), dx.data(), n, dt()).ok());
    const std::vector<char> raw = d_.download_bytes(dout, 2 * sizeof(double));
    double got[2];
    std::memcpy(got, raw.data(), sizeof(got));
    const double want = chunked_sum_squares(x, n);
    EXPECT_EQ(got[0], want) << "n " << n << ": " << (got[0] - want);
    EXPECT_EQ(got[1], 0.0) << "n " << n;
  }
  // A NaN or an Inf in the last chunk sets the flag; one past n does not.
  for (double bad : {double(NAN), double(INFINITY), -double(INFINITY)}) {
    Vec y = x;
    y[static_cast<size_t>(big - 2)] = bad;
    auto dy = d_.upload(y, dt());
    ASSERT_TRUE(d_.k().grad_stats(d_.stream(), dout.as<double>(), dy.data(), big, dt()).ok());
    std::vector<char> raw = d_.download_bytes(dout, 2 * sizeof(double));
    double got[2];
    std::memcpy(got, raw.data(), sizeof(got));
    EXPECT_EQ(got[1], 1.0) << bad;
    ASSERT_TRUE(d_.k().grad_stats(d_.stream(), dout.as<double>(), dy.data(), big - 2, dt()).ok());
    raw = d_.download_bytes(dout, 2 * sizeof(double));
    std::memcpy(got, raw.data(), sizeof(got));
    EXPECT_EQ(got[1], 0.0) << bad;
    EXPECT_EQ(got[0], chunked_sum_squares(x, big - 2));
  }
}

TEST_P(KernelTest, AccumulateAddsInFp32AndRoundsToTheDestination) {
  for (DType src_t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{4099}}) {
      Vec a = random_vec(static_cast<size_t>(n), 31, -4.0, 4.0);
      Vec b = random_vec(static_cast<size_t>(n), 32, -1.0, 1.0);
      auto da = d_.upload(a, dt());
      auto db = d_.upload(b, src_t);
      // Offset by one element: the unaligned path as well as the packed one.
      const int64_t off = n > 1 ? 1 : 0;
      ASSERT_TRUE(d_.k().accumulate(d_.stream(), da.data(), dt(), db.data(), src_t, n).ok());
      ASSERT_TRUE(d_.k()
                      .accumulate(d_.stream(), da.as<char>() + off * int64_t(dtype_size(dt())),
                                  dt(), db.as<char>() + off * int64_t(dtype_size(src_t)), src_t,
                                  n - off)
                      .ok());
      Vec want(a.size());
      for (int64_t i = 0; i < n; ++i) {
        // Each sum in fp32 (exact operands), rounded to dt().
        float v = static_cast<float>(round_to(dt(), static_cast<float>(a[i]) + float(b[i])));
        if (i >= off) v = static_cast<float>(round_to(dt(), v + float(b[i])));
        want[size_t(i)] = v;
      }
      const Vec got = d_.download(da, static_cast<size_t>(n), dt());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[size_t(i)], want[size_t(i)])
            << dtype_name(src_t) << " n " << n << " [" << i << "]";
      }
    }
  }
}

TEST_P(KernelTest, BadArgumentsAreRefusedAtEnqueue) {
  auto buf = d_.zeros(4096);
  MatmulArgs args;
  args.a = args.b = buf.data();
  args.c = buf.data();
  args.m = 0;
  args.n = args.k = 4;
  Status st = d_.k().matmul(d_.stream(), args);
  EXPECT_EQ(st.code(), ErrorCode::kConfig) << st.to_string();
  st = d_.k().attention_forward(d_.stream(), buf.data(), buf.as<float>(), buf.data(), 1, 4, 10, 3,
                                3, dt());
  EXPECT_EQ(st.code(), ErrorCode::kConfig) << st.to_string();  // C % NH != 0
  st = d_.k().softmax_cross_entropy(d_.stream(), buf.as<float>(), buf.data(), buf.as<int32_t>(), 2,
                                    10, 8, 1.0f, dt());
  EXPECT_EQ(st.code(), ErrorCode::kConfig) << st.to_string();  // Vp < V
  st = d_.k().gelu_forward(d_.stream(), nullptr, buf.data(), 4, dt());
  EXPECT_EQ(st.code(), ErrorCode::kConfig) << st.to_string();
  d_.sync();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KernelTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         dtype_param_name);

}  // namespace
}  // namespace strata::gpu::test
