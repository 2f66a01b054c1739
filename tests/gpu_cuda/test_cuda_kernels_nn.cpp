// CudaKernels against CpuKernels for the network ops (layernorm, attention, softmax +
// cross-entropy), for every dtype, and bitwise determinism of the reductions on the GPU.
#include "twin.h"

namespace strata::gpu::testing {
namespace {

class CudaVsCpuNn : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    twin_ = Twin::make();
    if (!twin_) GTEST_SKIP() << "no CUDA GPU";
  }
  DType t() const { return GetParam(); }
  std::unique_ptr<Twin> twin_;
};

TEST_P(CudaVsCpuNn, Layernorm) {
  Twin& tw = *twin_;
  for (int64_t C : {200, 1000}) {
    const int64_t N = 37;
    const size_t nc = static_cast<size_t>(N * C);
    TwinBuf inp = tw.random(nc, t(), 20, -2.0f, 3.0f);
    TwinBuf w = tw.random(static_cast<size_t>(C), t(), 21, 0.5f, 1.5f);
    TwinBuf bias = tw.random(static_cast<size_t>(C), t(), 22);
    TwinBuf out = tw.alloc(nc, t());
    TwinBuf mean = tw.alloc(static_cast<size_t>(N), DType::kF32);
    TwinBuf rstd = tw.alloc(static_cast<size_t>(N), DType::kF32);
    TWIN_RUN(tw, k.layernorm_forward(s, P(out), PF(mean), PF(rstd), P(inp), P(w), P(bias), N, C,
                                     1e-5f, t()));
    const std::string c = " C=" + std::to_string(C);
    tw.expect_close("layernorm_forward out" + c, out, tol_for(t()));
    tw.expect_close("layernorm_forward mean" + c, mean, 1e-5);
    tw.expect_close("layernorm_forward rstd" + c, rstd, 1e-5);

    TwinBuf dout = tw.random(nc, t(), 23);
    TwinBuf dinp = tw.random(nc, t(), 24);
    TwinBuf dw = tw.random(static_cast<size_t>(C), t(), 25);
    TwinBuf db = tw.random(static_cast<size_t>(C), t(), 26);
    tw.cpu_to_gpu(mean);  // identical saved statistics for both backwards
    tw.cpu_to_gpu(rstd);
    TWIN_RUN(tw, k.layernorm_backward(s, P(dinp), P(dw), P(db), P(dout), P(inp), P(w), PF(mean),
                                      PF(rstd), N, C, t()));
    tw.expect_close("layernorm_backward dinp" + c, dinp, tol_for(t()));
    tw.expect_close("layernorm_backward dweight" + c, dw, tol_for(t()));
    tw.expect_close("layernorm_backward dbias" + c, db, tol_for(t()));
  }
}

struct AttnCase {
  int64_t B, T, C, NH;
};

TEST_P(CudaVsCpuNn, Attention) {
  Twin& tw = *twin_;
  // Head sizes 16, 64, 96 (not a power of two) and 256 (the maximum, > 48 KiB shared memory);
  // T not a multiple of the 8-row or 32-key tiles.
  const AttnCase cases[] = {{2, 67, 48, 3}, {1, 40, 128, 2}, {2, 45, 192, 2}, {1, 33, 256, 1}};
  uint64_t seed = 30;
  for (const AttnCase& ac : cases) {
    const std::string name = " B=" + std::to_string(ac.B) + " T=" + std::to_string(ac.T) +
                             " C=" + std::to_string(ac.C) + " NH=" + std::to_string(ac.NH);
    const size_t btc = static_cast<size_t>(ac.B * ac.T * ac.C);
    TwinBuf qkv = tw.random(3 * btc, t(), ++seed, -2.0f, 2.0f);
    TwinBuf out = tw.alloc(btc, t());
    TwinBuf lse = tw.alloc(static_cast<size_t>(ac.B * ac.NH * ac.T), DType::kF32);
    TWIN_RUN(tw,
             k.attention_forward(s, P(out), PF(lse), P(qkv), ac.B, ac.T, ac.C, ac.NH, ac.NH, t()));
    tw.expect_close("attention_forward out" + name, out, tol_for(t()));
    tw.expect_close("attention_forward lse" + name, lse, 1e-5);

    TwinBuf dout = tw.random(btc, t(), ++seed);
    TwinBuf dqkv = tw.alloc(3 * btc, t());
    tw.upload(dqkv, std::vector<float>(dqkv.n, 7.0f));  // overwritten entirely
    tw.cpu_to_gpu(out);
    tw.cpu_to_gpu(lse);
    TWIN_RUN(tw, k.attention_backward(s, P(dqkv), P(dout), P(qkv), P(out), PF(lse), ac.B, ac.T,
                                      ac.C, ac.NH, ac.NH, t()));
    tw.expect_close("attention_backward dqkv" + name, dqkv, tol_for(t()) * 2);
  }
}

TEST_P(CudaVsCpuNn, SoftmaxCrossEntropy) {
  Twin& tw = *twin_;
  const int64_t N = 13, V = 1000, Vp = 1024;
  std::vector<int32_t> targets(static_cast<size_t>(N));
  TestRng rng(40);
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<int32_t>(rng.below(i, V));
  targets[3] = -1;  // ignored rows
  targets[9] = -100;
  TwinBuf tgt = tw.alloc(targets.size(), DType::kF32);
  tw.upload_raw(tgt, targets.data(), targets.size() * sizeof(int32_t));
  TwinBuf logits = tw.random(static_cast<size_t>(N * Vp), t(), 41, -4.0f, 4.0f);
  TwinBuf losses = tw.alloc(static_cast<size_t>(N), DType::kF32);
  TWIN_RUN(tw, k.softmax_cross_entropy(s, PF(losses), P(logits), PI(tgt), N, V, Vp,
                                       1.0f / static_cast<float>(N), t()));
  tw.expect_close("softmax_cross_entropy losses", losses, 1e-5);
  tw.expect_close("softmax_cross_entropy dlogits", logits, tol_for(t()));
  const auto got = tw.download(losses, true);
  EXPECT_EQ(got[3], 0.0f);
  EXPECT_EQ(got[9], 0.0f);
  const auto grad = tw.download(logits, true);
  for (int64_t c = V; c < Vp; ++c) ASSERT_EQ(grad[static_cast<size_t>(c)], 0.0f) << c;
}

// The GPU gives the same bits on every run (no timing-dependent reduction order).
TEST_P(CudaVsCpuNn, GpuResultsAreBitwiseReproducible) {
  Twin& tw = *twin_;
  const int64_t B = 2, T = 70, C = 128, NH = 2, Vp = 96;
  const size_t btc = static_cast<size_t>(B * T * C);
  TwinBuf qkv = tw.random(3 * btc, t(), 50);
  TwinBuf out = tw.alloc(btc, t());
  TwinBuf lse = tw.alloc(static_cast<size_t>(B * NH * T), DType::kF32);
  TwinBuf dout = tw.random(btc, t(), 51);
  std::vector<int32_t> tokens(static_cast<size_t>(B * T));
  TestRng rng(52);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(rng.below(i, 7));
  TwinBuf tok = tw.alloc(tokens.size(), DType::kF32);
  tw.upload_raw(tok, tokens.data(), tokens.size() * sizeof(int32_t));
  std::vector<unsigned char> first_dqkv, first_dwte, first_norm, first_dbias;
  for (int run = 0; run < 3; ++run) {
    TwinBuf dqkv = tw.alloc(3 * btc, t());
    TwinBuf dwte = tw.alloc(static_cast<size_t>(Vp * C), t());
    TwinBuf dwpe = tw.alloc(static_cast<size_t>(T * C), t());
    tw.upload(dwte, std::vector<float>(dwte.n, 0.0f));
    tw.upload(dwpe, std::vector<float>(dwpe.n, 0.0f));
    TwinBuf norm = tw.alloc(2, DType::kF32);
    TwinBuf dbias = tw.alloc(static_cast<size_t>(C), t());
    Kernels& k = tw.gpu->kernels();
    Stream& s = *tw.gs;
    ASSERT_TRUE(k.attention_forward(s, out.gpu.data(), lse.gpu.as<float>(), qkv.gpu.data(), B, T, C,
                                    NH, NH, t())
                    .ok());
    ASSERT_TRUE(k.attention_backward(s, dqkv.gpu.data(), dout.gpu.data(), qkv.gpu.data(),
                                     out.gpu.data(), lse.gpu.as<float>(), B, T, C, NH, NH, t())
                    .ok());
    ASSERT_TRUE(k.embedding_backward(s, dwte.gpu.data(), dwpe.gpu.data(), dout.gpu.data(),
                                     tok.gpu.as<int32_t>(), B, T, C, t())
                    .ok());
    ASSERT_TRUE(k.sum_squares(s, norm.gpu.as<float>(), qkv.gpu.data(),
                              3 * static_cast<int64_t>(btc), t(), false)
                    .ok());
    ASSERT_TRUE(k.bias_backward(s, dbias.gpu.data(), dout.gpu.data(), B * T, C, t(), false).ok());
    tw.sync();
    if (run == 0) {
      first_dqkv = tw.download_raw(dqkv, true);
      first_dwte = tw.download_raw(dwte, true);
      first_norm = tw.download_raw(norm, true);
      first_dbias = tw.download_raw(dbias, true);
    } else {
      EXPECT_EQ(tw.download_raw(dqkv, true), first_dqkv);
      EXPECT_EQ(tw.download_raw(dwte, true), first_dwte);
      EXPECT_EQ(tw.download_raw(norm, true), first_norm);
      EXPECT_EQ(tw.download_raw(dbias, true), first_dbias);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, CudaVsCpuNn,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         dtype_param_name);

}  // namespace
}  // namespace strata::gpu::testing
