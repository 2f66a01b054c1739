// Kernel conformance, part 2: layernorm, attention, embedding and softmax cross-entropy, forward
// and backward, against the float64 reference, in every dtype.
#include <cstdlib>
#include <utility>

#include "kernel_test_util.h"

namespace strata::gpu::test {
namespace {

using NnTest = KernelTest;

void layernorm_case(NnTest& t, DeviceFixture& d, DType dt, int64_t N, int64_t C, double tol) {
  const double eps = 1e-5;
  Vec x = random_vec(N * C, 20, -2.0, 3.0), w = random_vec(C, 21), b = random_vec(C, 22);
  Vec dout = random_vec(N * C, 23), dx = random_vec(N * C, 24), dw = random_vec(C, 25),
      db = random_vec(C, 26);
  auto px = d.upload(x, dt);
  auto pw = d.upload(w, dt);
  auto pb = d.upload(b, dt);
  auto pdout = d.upload(dout, dt);
  auto pdx = d.upload(dx, dt);
  auto pdw = d.upload(dw, dt);
  auto pdb = d.upload(db, dt);
  auto pout = d.zeros(N * C * dtype_size(dt));
  auto pmean = d.zeros(N * 4);
  auto prstd = d.zeros(N * 4);
  ASSERT_TRUE(d.k()
                  .layernorm_forward(d.stream(), pout.data(), pmean.as<float>(), prstd.as<float>(),
                                     px.data(), pw.data(), pb.data(), N, C, static_cast<float>(eps),
                                     dt)
                  .ok());
  ASSERT_TRUE(d.k()
                  .layernorm_backward(d.stream(), pdx.data(), pdw.data(), pdb.data(), pdout.data(),
                                      px.data(), pw.data(), pmean.as<float>(), prstd.as<float>(), N,
                                      C, dt)
                  .ok());
  Vec out, mean, rstd;
  ref::layernorm_forward(x, w, b, N, C, eps, out, mean, rstd);
  ref::layernorm_backward(dout, x, w, N, C, eps, dx, dw, db);
  const std::string shape = " N=" + std::to_string(N) + " C=" + std::to_string(C);
  expect_close(d.download(pout, N * C, dt), out, tol, "layernorm out" + shape);
  expect_close(d.download(pmean, N, DType::kF32), mean, 1e-5, "layernorm mean" + shape);
  expect_close(d.download(prstd, N, DType::kF32), rstd, 1e-5, "layernorm rstd" + shape);
  // The backward accumulates: the reference started from the same initial dx, dw, db.
  expect_close(d.download(pdx, N * C, dt), dx, tol, "layernorm dinp" + shape);
  expect_close(d.download(pdw, C, dt), dw, tol, "layernorm dweight" + shape);
  expect_close(d.download(pdb, C, dt), db, tol, "layernorm dbias" + shape);
  (void)t;
}

TEST_P(NnTest, LayernormForwardBackward) {
  layernorm_case(*this, d_, dt(), 11, 37, tol());
  layernorm_case(*this, d_, dt(), 70, 200, tol());
  layernorm_case(*this, d_, dt(), 300, 64, tol());  // parameter gradients in 19 row chunks
}

// The residual add fused with its LayerNorm gives the bits of add() then layernorm_forward() on
// the same device (the fused GPU kernel packs and orders its sums as the LayerNorm alone does),
// the residual written in place over its first input too; and the result is the float64
// reference's LayerNorm of the rounded sum.
TEST_P(NnTest, ResidualLayernormIsTheAddThenTheLayernorm) {
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{11, 37}, {70, 200}, {9, 64}}) {
    Vec a = random_vec(N * C, 30, -2.0, 3.0), b = random_vec(N * C, 31), w = random_vec(C, 32),
        bias = random_vec(C, 33);
    auto pa = d_.upload(a, dt());
    auto pb = d_.upload(b, dt());
    auto pw = d_.upload(w, dt());
    auto pbias = d_.upload(bias, dt());
    const size_t bytes = static_cast<size_t>(N * C) * dtype_size(dt());
    auto res1 = d_.zeros(bytes), out1 = d_.zeros(bytes), res2 = d_.zeros(bytes),
         out2 = d_.zeros(bytes);
    auto m1 = d_.zeros(N * 4), r1 = d_.zeros(N * 4), m2 = d_.zeros(N * 4), r2 = d_.zeros(N * 4);
    ASSERT_TRUE(d_.k().add(d_.stream(), res1.data(), pa.data(), pb.data(), N * C, dt()).ok());
    ASSERT_TRUE(d_.k()
                    .layernorm_forward(d_.stream(), out1.data(), m1.as<float>(), r1.as<float>(),
                                       res1.data(), pw.data(), pbias.data(), N, C, 1e-5f, dt())
                    .ok());
    ASSERT_TRUE(d_.k()
                    .residual_layernorm_forward(
                        d_.stream(), res2.data(), out2.data(), m2.as<float>(), r2.as<float>(),
                        pa.data(), pb.data(), pw.data(), pbias.data(), N, C, 1e-5f, dt())
                    .ok());
    const std::string shape = " N=" + std::to_string(N) + " C=" + std::to_string(C);
    EXPECT_EQ(d_.download_bytes(res2, bytes), d_.download_bytes(res1, bytes))
        << "residual" << shape;
    EXPECT_EQ(d_.download_bytes(out2, bytes), d_.download_bytes(out1, bytes)) << "out" << shape;
    EXPECT_EQ(d_.download_bytes(m2, N * 4), d_.download_bytes(m1, N * 4)) << "mean" << shape;
    EXPECT_EQ(d_.download_bytes(r2, N * 4), d_.download_bytes(r1, N * 4)) << "rstd" << shape;
    // In place over a: the same.
    ASSERT_TRUE(d_.k()
                    .residual_layernorm_forward(d_.stream(), pa.data(), out2.data(), m2.as<float>(),
                                                r2.as<float>(), pa.data(), pb.data(), pw.data(),
                                                pbias.data(), N, C, 1e-5f, dt())
                    .ok());
    EXPECT_EQ(d_.download_bytes(pa, bytes), d_.download_bytes(res1, bytes)) << "in place" << shape;
    EXPECT_EQ(d_.download_bytes(out2, bytes), d_.download_bytes(out1, bytes))
        << "in place out" << shape;
    // Against the reference: the LayerNorm of the rounded sum.
    Vec sum = d_.download(res1, N * C, dt()), out, mean, rstd;
    ref::layernorm_forward(sum, w, bias, N, C, 1e-5, out, mean, rstd);
    expect_close(d_.download(out2, N * C, dt()), out, tol(), "residual layernorm" + shape);
  }
}

// NKV key/value heads (grouped-query attention); NKV = 0 means NH (multi-head). qkv starts
// `shift` elements into its buffer (1: not 16-byte aligned, the CUDA kernels' element-wise
// copies).
void attention_case(DeviceFixture& d, DType dt, int64_t B, int64_t T, int64_t C, int64_t NH,
                    double tol, int64_t NKV = 0, int64_t shift = 0) {
  if (NKV == 0) NKV = NH;
  const int64_t width = C + 2 * NKV * (C / NH);
  Vec qkv = random_vec(B * T * width, 30, -1.5, 1.5), dout = random_vec(B * T * C, 31);
  Vec shifted(static_cast<size_t>(shift), 0.0);
  shifted.insert(shifted.end(), qkv.begin(), qkv.end());
  auto pqkv_buf = d.upload(shifted, dt);  // rounds `shifted`; the references read the same
  qkv.assign(shifted.begin() + shift, shifted.end());
  void* pqkv_data =
      static_cast<char*>(pqkv_buf.data()) + static_cast<size_t>(shift) * dtype_size(dt);
  auto pdout = d.upload(dout, dt);
  auto pout = d.zeros(B * T * C * dtype_size(dt));
  auto plse = d.zeros(B * NH * T * 4);
  Vec junk = random_vec(B * T * width, 32);  // dqkv is overwritten, not accumulated
  auto pdqkv = d.upload(junk, dt);
  Status st = d.k().attention_forward(d.stream(), pout.data(), plse.as<float>(), pqkv_data, B, T, C,
                                      NH, NKV, dt);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = d.k().attention_backward(d.stream(), pdqkv.data(), pdout.data(), pqkv_data, pout.data(),
                                plse.as<float>(), B, T, C, NH, NKV, dt);
  ASSERT_TRUE(st.ok()) << st.to_string();
  Vec out, lse, dqkv;
  ref::attention_forward(qkv, B, T, C, NH, NKV, out, lse);
  ref::attention_backward(dout, qkv, B, T, C, NH, NKV, dqkv);
  const std::string shape = " B=" + std::to_string(B) + " T=" + std::to_string(T) +
                            " C=" + std::to_string(C) + " NH=" + std::to_string(NH) +
                            " NKV=" + std::to_string(NKV) + " shift=" + std::to_string(shift);
  expect_close(d.download(pout, out.size(), dt), out, tol, "attention out" + shape);
  expect_close(d.download(plse, lse.size(), DType::kF32), lse, 1e-5, "attention lse" + shape);
  expect_close(d.download(pdqkv, dqkv.size(), dt), dqkv, tol, "attention dqkv" + shape);
}

TEST_P(NnTest, AttentionForwardBackward) {
  attention_case(d_, dt(), 2, 7, 12, 3, tol());
  attention_case(d_, dt(), 1, 67, 40, 2, tol());  // several 32-row query blocks, T odd
  attention_case(d_, dt(), 3, 1, 6, 1, tol());    // T = 1
  // Head sizes 64 and 128 (GPT-2's and the CUDA kernels' other builds), and 256, the largest:
  // over 48 KiB of shared memory on CUDA, two key tiles.
  attention_case(d_, dt(), 1, 33, 128, 2, tol());
  attention_case(d_, dt(), 1, 20, 128, 1, tol());
  attention_case(d_, dt(), 1, 40, 512, 2, tol());
  // Several 64-row blocks and tiles, the last one partial (the tensor-core kernels' unit), at
  // head sizes 64 and 128; and qkv not 16-byte aligned.
  attention_case(d_, dt(), 2, 150, 128, 2, tol());
  attention_case(d_, dt(), 1, 130, 256, 2, tol());
  attention_case(d_, dt(), 1, 70, 128, 2, tol(), 0, 1);
}

// Grouped-query attention: groups of 2 and 4 query heads, and one key/value head for all
// (multi-query); head size 8 (scalar kernels) and 32 and 64 (tensor cores on CUDA).
TEST_P(NnTest, GroupedQueryAttention) {
  attention_case(d_, dt(), 2, 9, 32, 4, tol(), 2);
  attention_case(d_, dt(), 1, 70, 256, 8, tol(), 2);
  attention_case(d_, dt(), 2, 33, 256, 4, tol(), 1);
  attention_case(d_, dt(), 1, 80, 512, 4, tol(), 2);  // head size 128
}

// The CUDA backend takes 16-bit head sizes 32, 64 and 128 to its tensor-core kernels unless
// STRATA_CUDA_ATTENTION=scalar (launch.h): the same cases on the scalar kernels.
TEST_P(NnTest, AttentionOnTheScalarKernelsToo) {
  ::setenv("STRATA_CUDA_ATTENTION", "scalar", 1);
  attention_case(d_, dt(), 1, 33, 128, 2, tol());
  attention_case(d_, dt(), 2, 150, 128, 2, tol());
  attention_case(d_, dt(), 1, 70, 256, 8, tol(), 2);
  ::unsetenv("STRATA_CUDA_ATTENTION");
}

// C = 21: element by element; C = 24: the CUDA forward's 16-byte path (fp32 and 16-bit).
void embedding_case(DeviceFixture& d, DType dt, double tol, int64_t C) {
  const int64_t B = 3, T = 9, V = 11, Vp = 16, Tmax = 13;
  std::vector<int32_t> tokens(B * T);
  std::mt19937 gen(40);
  for (auto& tok : tokens) tok = static_cast<int32_t>(gen() % 5);  // many repeats
  tokens[4] = V - 1;
  Vec wte = random_vec(Vp * C, 41), wpe = random_vec(Tmax * C, 42),
      dout = random_vec(B * T * C, 43);
  Vec dwte = random_vec(Vp * C, 44), dwpe = random_vec(Tmax * C, 45);
  auto ptok = d.upload_i32(tokens);
  auto pwte = d.upload(wte, dt);
  auto pwpe = d.upload(wpe, dt);
  auto pdout = d.upload(dout, dt);
  auto pdwte = d.upload(dwte, dt);
  auto pdwpe = d.upload(dwpe, dt);
  auto pout = d.zeros(B * T * C * dtype_size(dt));
  ASSERT_TRUE(d.k()
                  .embedding_forward(d.stream(), pout.data(), ptok.as<int32_t>(), pwte.data(),
                                     pwpe.data(), B, T, C, dt)
                  .ok());
  ASSERT_TRUE(d.k()
                  .embedding_backward(d.stream(), pdwte.data(), pdwpe.data(), pdout.data(),
                                      ptok.as<int32_t>(), B, T, C, dt)
                  .ok());
  Vec out;
  ref::embedding_forward(tokens, wte, wpe, B, T, C, out);
  ref::embedding_backward(dout, tokens, B, T, C, dwte, dwpe);
  expect_close(d.download(pout, out.size(), dt), out, tol, "embedding out C=" + std::to_string(C));
  expect_close(d.download(pdwte, dwte.size(), dt), dwte, tol, "embedding dwte");
  expect_close(d.download(pdwpe, dwpe.size(), dt), dwpe, tol, "embedding dwpe");
}

TEST_P(NnTest, EmbeddingForwardBackward) {
  embedding_case(d_, dt(), tol(), 21);
  embedding_case(d_, dt(), tol(), 24);
}

// embedding_backward from dwte, dwpe as given against the reference (on the values as uploaded,
// rounded to the dtype); dwpe compared when asked.
void embedding_backward_case(DeviceFixture& d, DType dt, const std::vector<int32_t>& tokens,
                             Vec dout, Vec dwte, Vec dwpe, int64_t B, int64_t T, int64_t C,
                             double tol, bool compare_dwpe) {
  auto ptok = d.upload_i32(tokens);
  auto pdout = d.upload(dout, dt);
  auto pdwte = d.upload(dwte, dt);
  auto pdwpe = d.upload(dwpe, dt);
  ASSERT_TRUE(d.k()
                  .embedding_backward(d.stream(), pdwte.data(), pdwpe.data(), pdout.data(),
                                      ptok.as<int32_t>(), B, T, C, dt)
                  .ok());
  ref::embedding_backward(dout, tokens, B, T, C, dwte, dwpe);
  expect_close(d.download(pdwte, dwte.size(), dt), dwte, tol, "embedding dwte");
  if (compare_dwpe) expect_close(d.download(pdwpe, dwpe.size(), dt), dwpe, tol, "embedding dwpe");
}

// A token at most positions: its dwte row is the fp32 sum of 512 small gradients, rounded once
// (kernels.h). Rounding after every addition would stall a bf16 sum near 2.5 of the 5.1.
TEST_P(NnTest, EmbeddingBackwardSumsARepeatedTokenInFp32) {
  const int64_t B = 4, T = 128, C = 8, Vp = 8;
  std::vector<int32_t> tokens(B * T, 3);
  for (int64_t i = 0; i < B * T; i += 17) tokens[i] = 5;
  embedding_backward_case(d_, dt(), tokens, random_vec(B * T * C, 46, 0.0, 0.02), Vec(Vp * C, 0.0),
                          Vec(T * C, 0.0), B, T, C, tol(), false);
}

// Many positions, not a power of two (the CUDA kernel sorts (token, position) keys padded to
// 1024), tokens repeated all over and in runs.
TEST_P(NnTest, EmbeddingBackwardOverManyPositions) {
  const int64_t B = 3, T = 200, C = 5, Vp = 64;
  std::vector<int32_t> tokens(B * T);
  std::mt19937 gen(47);
  for (auto& tok : tokens) tok = static_cast<int32_t>(gen() % 37);
  for (int64_t i = 100; i < 140; ++i) tokens[i] = 63;  // a run, and the largest token
  embedding_backward_case(d_, dt(), tokens, random_vec(B * T * C, 48), random_vec(Vp * C, 49),
                          random_vec(T * C, 50), B, T, C, tol(), true);
}

TEST_P(NnTest, SoftmaxCrossEntropyWithIgnoredRowsAndPaddedVocab) {
  const int64_t N = 13, V = 50, Vp = 64;
  std::vector<int32_t> targets(N);
  for (int64_t r = 0; r < N; ++r) targets[r] = static_cast<int32_t>((r * 7) % V);
  targets[3] = -1;
  targets[8] = -100;
  targets[12] = V - 1;
  Vec logits = random_vec(N * Vp, 50, -4.0, 4.0);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t i = V; i < Vp; ++i) logits[r * Vp + i] = 1e3;  // padding must be ignored
  }
  auto plogits = d_.upload(logits, dt());
  auto ptargets = d_.upload_i32(targets);
  auto plosses = d_.zeros(N * 4);
  const double dloss = 1.0 / 11.0;
  ASSERT_TRUE(d_.k()
                  .softmax_cross_entropy(d_.stream(), plosses.as<float>(), plogits.data(),
                                         ptargets.as<int32_t>(), N, V, Vp,
                                         static_cast<float>(dloss), dt())
                  .ok());
  Vec losses, dlogits;
  ref::softmax_cross_entropy(logits, targets, N, V, Vp, dloss, losses, dlogits);
  expect_close(d_.download(plosses, N, DType::kF32), losses, 1e-5, "cross-entropy losses");
  expect_close(d_.download(plogits, N * Vp, dt()), dlogits, tol(), "cross-entropy dlogits");
}

TEST_P(NnTest, CrossEntropyTargetOutOfRangeIsAnErrorAtSynchronize) {
  const int64_t N = 2, V = 5, Vp = 8;
  std::vector<int32_t> targets = {1, 7};
  Vec logits = random_vec(N * Vp, 51);
  auto plogits = d_.upload(logits, dt());
  auto ptargets = d_.upload_i32(targets);
  auto plosses = d_.zeros(N * 4);
  ASSERT_TRUE(d_.k()
                  .softmax_cross_entropy(d_.stream(), plosses.as<float>(), plogits.data(),
                                         ptargets.as<int32_t>(), N, V, Vp, 1.0f, dt())
                  .ok());
  const Status st = d_.stream().synchronize();
  if (!cuda_kernels()) {
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("target"), std::string::npos) << st.to_string();
  } else {  // the CUDA kernels cannot fail a stream: they give the row a NaN loss (launch.h)
    ASSERT_TRUE(st.ok()) << st.to_string();
    const Vec losses = d_.download(plosses, N, DType::kF32);
    EXPECT_TRUE(std::isfinite(losses[0])) << losses[0];
    EXPECT_TRUE(std::isnan(losses[1])) << losses[1];
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NnTest, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         dtype_param_name);

}  // namespace
}  // namespace strata::gpu::test
