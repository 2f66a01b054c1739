// Kernel conformance, part 3: every backward (fp32 kernels) against central finite differences of
// the float64 reference forward, and bitwise determinism (run to run, and across thread counts on
// the CpuDevice).
#include "kernel_test_util.h"

namespace strata::gpu::test {
namespace {

using FdTest = FdFixture;

TEST_F(FdTest, MatmulBackwardIsTheTransposedProducts) {
  const int64_t M = 5, K = 7, N = 6;
  Vec a = random_vec(M * K, 60), b = random_vec(K * N, 61), g = random_vec(M * N, 62);
  auto pa = d_.upload(a, f32_);
  auto pb = d_.upload(b, f32_);
  auto pg = d_.upload(g, f32_);
  auto pda = d_.zeros(M * K * 4);
  auto pdb = d_.zeros(K * N * 4);
  MatmulArgs da;  // dA[M,K] = G[M,N] B^T
  da.a = pg.data();
  da.b = pb.data();
  da.c = pda.data();
  da.m = M;
  da.n = K;
  da.k = N;
  da.trans_b = true;
  ASSERT_TRUE(d_.k().matmul(d_.stream(), da).ok());
  MatmulArgs db;  // dB[K,N] = A^T G
  db.a = pa.data();
  db.b = pg.data();
  db.c = pdb.data();
  db.m = K;
  db.n = N;
  db.k = M;
  db.trans_a = true;
  ASSERT_TRUE(d_.k().matmul(d_.stream(), db).ok());
  auto loss_a = [&](const Vec& x) {
    Vec c(M * N);
    ref::matmul(x, b, c, {}, M, N, K, false, false, 1.0, 0.0);
    return dot(c, g);
  };
  auto loss_b = [&](const Vec& x) {
    Vec c(M * N);
    ref::matmul(a, x, c, {}, M, N, K, false, false, 1.0, 0.0);
    return dot(c, g);
  };
  expect_close(d_.download(pda, M * K, f32_), finite_difference(loss_a, a), kFdTol, "dA vs fd");
  expect_close(d_.download(pdb, K * N, f32_), finite_difference(loss_b, b), kFdTol, "dB vs fd");
}

TEST_F(FdTest, BiasBackward) {
  const int64_t M = 9, N = 5;
  Vec bias = random_vec(N, 63), g = random_vec(M * N, 64);
  auto pg = d_.upload(g, f32_);
  auto pdb = d_.zeros(N * 4);
  ASSERT_TRUE(d_.k().bias_backward(d_.stream(), pdb.data(), pg.data(), M, N, f32_, false).ok());
  auto loss = [&](const Vec& bv) {
    double s = 0.0;
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) s += g[i * N + j] * bv[j];
    }
    return s;
  };
  expect_close(d_.download(pdb, N, f32_), finite_difference(loss, bias), kFdTol, "dbias vs fd");
}

TEST_F(FdTest, LayernormBackward) {
  const int64_t N = 4, C = 9;
  const double eps = 1e-5;
  Vec x = random_vec(N * C, 65), w = random_vec(C, 66), b = random_vec(C, 67),
      g = random_vec(N * C, 68);
  auto px = d_.upload(x, f32_);
  auto pw = d_.upload(w, f32_);
  auto pb = d_.upload(b, f32_);
  auto pg = d_.upload(g, f32_);
  auto pout = d_.zeros(N * C * 4);
  auto pmean = d_.zeros(N * 4);
  auto prstd = d_.zeros(N * 4);
  auto pdx = d_.zeros(N * C * 4);
  auto pdw = d_.zeros(C * 4);
  auto pdb = d_.zeros(C * 4);
  ASSERT_TRUE(d_.k()
                  .layernorm_forward(d_.stream(), pout.data(), pmean.as<float>(), prstd.as<float>(),
                                     px.data(), pw.data(), pb.data(), N, C, static_cast<float>(eps),
                                     f32_)
                  .ok());
  ASSERT_TRUE(d_.k()
                  .layernorm_backward(d_.stream(), pdx.data(), pdw.data(), pdb.data(), pg.data(),
                                      px.data(), pw.data(), pmean.as<float>(), prstd.as<float>(), N,
                                      C, f32_)
                  .ok());
  auto loss = [&](const Vec& xv, const Vec& wv, const Vec& bv) {
    Vec out, mean, rstd;
    ref::layernorm_forward(xv, wv, bv, N, C, eps, out, mean, rstd);
    return dot(out, g);
  };
  expect_close(d_.download(pdx, N * C, f32_),
               finite_difference([&](const Vec& v) { return loss(v, w, b); }, x), kFdTol,
               "dinp vs fd");
  expect_close(d_.download(pdw, C, f32_),
               finite_difference([&](const Vec& v) { return loss(x, v, b); }, w), kFdTol,
               "dweight vs fd");
  expect_close(d_.download(pdb, C, f32_),
               finite_difference([&](const Vec& v) { return loss(x, w, v); }, b), kFdTol,
               "dbias vs fd");
}

TEST_F(FdTest, GeluBackward) {
  const int64_t n = 41;
  Vec x = random_vec(n, 69, -4.0, 4.0), g = random_vec(n, 70);
  auto px = d_.upload(x, f32_);
  auto pg = d_.upload(g, f32_);
  auto pdx = d_.zeros(n * 4);
  ASSERT_TRUE(d_.k().gelu_backward(d_.stream(), pdx.data(), px.data(), pg.data(), n, f32_).ok());
  auto loss = [&](const Vec& v) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += g[i] * ref::gelu(v[i]);
    return s;
  };
  expect_close(d_.download(pdx, n, f32_), finite_difference(loss, x), kFdTol, "gelu dinp vs fd");
}

// Multi-head (NKV = NH) and grouped-query (2 query heads a key/value head).
TEST_F(FdTest, AttentionBackward) {
  for (const int64_t NKV : {4, 2}) {
    const int64_t B = 2, T = 5, C = 8, NH = 4, width = C + 2 * NKV * (C / NH);
    Vec qkv = random_vec(B * T * width, 71, -1.5, 1.5), g = random_vec(B * T * C, 72);
    auto pqkv = d_.upload(qkv, f32_);
    auto pg = d_.upload(g, f32_);
    auto pout = d_.zeros(B * T * C * 4);
    auto plse = d_.zeros(B * NH * T * 4);
    auto pdqkv = d_.zeros(B * T * width * 4);
    ASSERT_TRUE(d_.k()
                    .attention_forward(d_.stream(), pout.data(), plse.as<float>(), pqkv.data(), B,
                                       T, C, NH, NKV, f32_)
                    .ok());
    ASSERT_TRUE(d_.k()
                    .attention_backward(d_.stream(), pdqkv.data(), pg.data(), pqkv.data(),
                                        pout.data(), plse.as<float>(), B, T, C, NH, NKV, f32_)
                    .ok());
    auto loss = [&](const Vec& v) {
      Vec out, lse;
      ref::attention_forward(v, B, T, C, NH, NKV, out, lse);
      return dot(out, g);
    };
    expect_close(d_.download(pdqkv, qkv.size(), f32_), finite_difference(loss, qkv), kFdTol,
                 "dqkv vs fd, NKV=" + std::to_string(NKV));
  }
}

TEST_F(FdTest, EmbeddingBackward) {
  const int64_t B = 2, T = 3, C = 4, Vp = 5;
  std::vector<int32_t> tokens = {1, 3, 1, 0, 1, 4};
  Vec wte = random_vec(Vp * C, 73), wpe = random_vec(T * C, 74), g = random_vec(B * T * C, 75);
  auto ptok = d_.upload_i32(tokens);
  auto pg = d_.upload(g, f32_);
  auto pdwte = d_.zeros(Vp * C * 4);
  auto pdwpe = d_.zeros(T * C * 4);
  ASSERT_TRUE(d_.k()
                  .embedding_backward(d_.stream(), pdwte.data(), pdwpe.data(), pg.data(),
                                      ptok.as<int32_t>(), B, T, C, f32_)
                  .ok());
  auto loss = [&](const Vec& te, const Vec& pe) {
    Vec out;
    ref::embedding_forward(tokens, te, pe, B, T, C, out);
    return dot(out, g);
  };
  expect_close(d_.download(pdwte, wte.size(), f32_),
               finite_difference([&](const Vec& v) { return loss(v, wpe); }, wte), kFdTol,
               "dwte vs fd");
  expect_close(d_.download(pdwpe, wpe.size(), f32_),
               finite_difference([&](const Vec& v) { return loss(wte, v); }, wpe), kFdTol,
               "dwpe vs fd");
}

TEST_F(FdTest, CrossEntropyGradient) {
  const int64_t N = 4, V = 7, Vp = 8;
  std::vector<int32_t> targets = {2, -1, 6, 0};
  Vec logits = random_vec(N * Vp, 76, -3.0, 3.0);
  const double dloss = 0.25;
  auto plogits = d_.upload(logits, f32_);
  auto ptargets = d_.upload_i32(targets);
  auto plosses = d_.zeros(N * 4);
  ASSERT_TRUE(d_.k()
                  .softmax_cross_entropy(d_.stream(), plosses.as<float>(), plogits.data(),
                                         ptargets.as<int32_t>(), N, V, Vp,
                                         static_cast<float>(dloss), f32_)
                  .ok());
  auto loss = [&](const Vec& v) {
    Vec losses, dl;
    ref::softmax_cross_entropy(v, targets, N, V, Vp, dloss, losses, dl);
    double s = 0.0;
    for (double l : losses) s += dloss * l;
    return s;
  };
  expect_close(d_.download(plogits, N * Vp, f32_), finite_difference(loss, logits), kFdTol,
               "dlogits vs fd");
}

}  // namespace
}  // namespace strata::gpu::test
