// Kernel conformance, part 5: the operations of Llama-shaped models (RMSNorm, rotary position
// embeddings, SwiGLU), forward and backward, against the float64 references in every dtype, and
// the fp32 backwards against central finite differences of the float64 forwards.
#include <cmath>

#include "kernel_test_util.h"

namespace strata::gpu::test {
namespace {

using LlamaTest = KernelTest;

void rmsnorm_case(DeviceFixture& d, DType dt, int64_t N, int64_t C, double tol) {
  const double eps = 1e-6;
  Vec x = random_vec(N * C, 120, -2.0, 3.0), w = random_vec(C, 121);
  Vec dout = random_vec(N * C, 122), dx = random_vec(N * C, 123), dw = random_vec(C, 124);
  auto px = d.upload(x, dt);
  auto pw = d.upload(w, dt);
  auto pdout = d.upload(dout, dt);
  auto pdx = d.upload(dx, dt);
  auto pdw = d.upload(dw, dt);
  auto pout = d.zeros(N * C * dtype_size(dt));
  auto prstd = d.zeros(N * 4);
  ASSERT_TRUE(d.k()
                  .rmsnorm_forward(d.stream(), pout.data(), prstd.as<float>(), px.data(), pw.data(),
                                   N, C, static_cast<float>(eps), dt)
                  .ok());
  ASSERT_TRUE(d.k()
                  .rmsnorm_backward(d.stream(), pdx.data(), pdw.data(), pdout.data(), px.data(),
                                    pw.data(), prstd.as<float>(), N, C, dt)
                  .ok());
  Vec out, rstd;
  ref::rmsnorm_forward(x, w, N, C, eps, out, rstd);
  ref::rmsnorm_backward(dout, x, w, N, C, eps, dx, dw);
  const std::string shape = " N=" + std::to_string(N) + " C=" + std::to_string(C);
  expect_close(d.download(pout, N * C, dt), out, tol, "rmsnorm out" + shape);
  expect_close(d.download(prstd, N, DType::kF32), rstd, 1e-5, "rmsnorm rstd" + shape);
  // The backward accumulates: the reference started from the same initial dx, dw.
  expect_close(d.download(pdx, N * C, dt), dx, tol, "rmsnorm dinp" + shape);
  expect_close(d.download(pdw, C, dt), dw, tol, "rmsnorm dweight" + shape);
}

TEST_P(LlamaTest, RmsnormForwardBackward) {
  rmsnorm_case(d_, dt(), 11, 37, tol());
  rmsnorm_case(d_, dt(), 70, 200, tol());
  rmsnorm_case(d_, dt(), 300, 64, tol());  // the weight gradient in row chunks on CUDA
}

// Llama's inverse frequencies theta^(-2i/HS), as fp32.
Vec inv_freqs(int64_t HS, double theta) {
  Vec f(static_cast<size_t>(HS / 2));
  for (int64_t i = 0; i < HS / 2; ++i) {
    f[i] = static_cast<float>(std::pow(theta, -2.0 * static_cast<double>(i) / HS));
  }
  return f;
}

// q (3 heads) and k (1 head) rotated, v (1 head) left alone, in rows of 5 heads.
void rope_case(DeviceFixture& d, DType dt, int64_t B, int64_t T, int64_t HS, double tol) {
  const int64_t heads = 4, stride = 5 * HS;
  Vec x = random_vec(B * T * stride, 125, -2.0, 2.0);
  Vec freq = inv_freqs(HS, 10000.0);
  auto px = d.upload(x, dt);
  auto pf = d.upload(freq, DType::kF32);
  ASSERT_TRUE(
      d.k().rope(d.stream(), px.data(), pf.as<float>(), B, T, heads, HS, stride, false, dt).ok());
  Vec want = x;
  ref::rope(want, freq, B, T, heads, HS, stride, 1.0);
  const std::string shape =
      " B=" + std::to_string(B) + " T=" + std::to_string(T) + " HS=" + std::to_string(HS);
  const Vec got = d.download(px, B * T * stride, dt);
  expect_close(got, want, tol, "rope" + shape);
  for (int64_t r = 0; r < B * T; ++r) {  // the v head: the same bits
    for (int64_t i = heads * HS; i < stride; ++i) {
      ASSERT_EQ(got[r * stride + i], x[r * stride + i]) << "v changed at row " << r;
    }
  }
  // The inverse brings the rotated values back.
  ASSERT_TRUE(
      d.k().rope(d.stream(), px.data(), pf.as<float>(), B, T, heads, HS, stride, true, dt).ok());
  Vec back = want;
  ref::rope(back, freq, B, T, heads, HS, stride, -1.0);
  expect_close(d.download(px, B * T * stride, dt), back, 2 * tol, "rope inverse" + shape);
}

TEST_P(LlamaTest, RopeRotatesQueryAndKeyHeads) {
  rope_case(d_, dt(), 2, 7, 8, tol());
  rope_case(d_, dt(), 1, 33, 64, tol());
}

void swiglu_case(DeviceFixture& d, DType dt, int64_t N, int64_t H, double tol) {
  Vec gu = random_vec(N * 2 * H, 126, -4.0, 4.0), dout = random_vec(N * H, 127);
  auto pgu = d.upload(gu, dt);
  auto pdout = d.upload(dout, dt);
  auto pout = d.zeros(N * H * dtype_size(dt));
  Vec junk = random_vec(N * 2 * H, 128);
  auto pdgu = d.upload(junk, dt);  // overwritten
  ASSERT_TRUE(d.k().swiglu_forward(d.stream(), pout.data(), pgu.data(), N, H, dt).ok());
  ASSERT_TRUE(
      d.k().swiglu_backward(d.stream(), pdgu.data(), pgu.data(), pdout.data(), N, H, dt).ok());
  Vec out, dgu;
  ref::swiglu_forward(gu, N, H, out);
  ref::swiglu_backward(dout, gu, N, H, dgu);
  const std::string shape = " N=" + std::to_string(N) + " H=" + std::to_string(H);
  expect_close(d.download(pout, N * H, dt), out, tol, "swiglu out" + shape);
  expect_close(d.download(pdgu, N * 2 * H, dt), dgu, tol, "swiglu dgate_up" + shape);
}

TEST_P(LlamaTest, SwigluForwardBackward) {
  swiglu_case(d_, dt(), 9, 13, tol());
  swiglu_case(d_, dt(), 40, 300, tol());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LlamaTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         dtype_param_name);

// --- fp32 backwards against finite differences of the float64 forwards ---

using LlamaFdTest = FdFixture;

TEST_F(LlamaFdTest, RmsnormBackward) {
  const int64_t N = 4, C = 9;
  const double eps = 1e-5;
  Vec x = random_vec(N * C, 130), w = random_vec(C, 131), g = random_vec(N * C, 132);
  auto px = d_.upload(x, f32_);
  auto pw = d_.upload(w, f32_);
  auto pg = d_.upload(g, f32_);
  auto pout = d_.zeros(N * C * 4);
  auto prstd = d_.zeros(N * 4);
  auto pdx = d_.zeros(N * C * 4);
  auto pdw = d_.zeros(C * 4);
  ASSERT_TRUE(d_.k()
                  .rmsnorm_forward(d_.stream(), pout.data(), prstd.as<float>(), px.data(),
                                   pw.data(), N, C, static_cast<float>(eps), f32_)
                  .ok());
  ASSERT_TRUE(d_.k()
                  .rmsnorm_backward(d_.stream(), pdx.data(), pdw.data(), pg.data(), px.data(),
                                    pw.data(), prstd.as<float>(), N, C, f32_)
                  .ok());
  auto loss = [&](const Vec& xv, const Vec& wv) {
    Vec out, rstd;
    ref::rmsnorm_forward(xv, wv, N, C, eps, out, rstd);
    return dot(out, g);
  };
  expect_close(d_.download(pdx, N * C, f32_),
               finite_difference([&](const Vec& v) { return loss(v, w); }, x), kFdTol,
               "rmsnorm dinp vs fd");
  expect_close(d_.download(pdw, C, f32_),
               finite_difference([&](const Vec& v) { return loss(x, v); }, w), kFdTol,
               "rmsnorm dweight vs fd");
}

// The gradient of sum(rope(x) * g) is the inverse rotation of g.
TEST_F(LlamaFdTest, RopeInverseIsTheBackward) {
  const int64_t B = 2, T = 5, HS = 6, heads = 2, stride = 3 * HS;
  Vec x = random_vec(B * T * stride, 133), g = random_vec(B * T * stride, 134);
  const Vec freq = inv_freqs(HS, 500000.0);
  auto pg = d_.upload(g, f32_);
  Vec fcopy = freq;
  auto pf = d_.upload(fcopy, f32_);
  ASSERT_TRUE(d_.k()
                  .rope(d_.stream(), pg.data(), pf.as<float>(), B, T, heads, HS, stride, true, f32_)
                  .ok());
  auto loss = [&](const Vec& xv) {
    Vec y = xv;
    ref::rope(y, freq, B, T, heads, HS, stride, 1.0);
    return dot(y, g);
  };
  expect_close(d_.download(pg, B * T * stride, f32_), finite_difference(loss, x), kFdTol,
               "rope backward vs fd");
}

TEST_F(LlamaFdTest, SwigluBackward) {
  const int64_t N = 5, H = 7;
  Vec gu = random_vec(N * 2 * H, 135, -3.0, 3.0), g = random_vec(N * H, 136);
  auto pgu = d_.upload(gu, f32_);
  auto pg = d_.upload(g, f32_);
  auto pdgu = d_.zeros(N * 2 * H * 4);
  ASSERT_TRUE(
      d_.k().swiglu_backward(d_.stream(), pdgu.data(), pgu.data(), pg.data(), N, H, f32_).ok());
  auto loss = [&](const Vec& v) {
    Vec out;
    ref::swiglu_forward(v, N, H, out);
    return dot(out, g);
  };
  expect_close(d_.download(pdgu, N * 2 * H, f32_), finite_difference(loss, gu), kFdTol,
               "swiglu backward vs fd");
}

}  // namespace
}  // namespace strata::gpu::test
