// Kernel conformance, part 4: determinism (kernels.h): the same inputs give the same bits on every
// run, and on the CpuDevice also for any thread count (fixed chunking and reduction order).
#include "kernel_test_util.h"

namespace strata::gpu::test {
namespace {

// Runs the ops with reductions on fixed inputs; returns every output's bytes.
std::vector<std::vector<char>> run_reductions(DeviceFixture& d) {
  const DType t = DType::kBF16;
  const int64_t M = 130, N = 600, K = 70, B = 2, T = 37, C = 48, NH = 4, Vp = 20;
  std::vector<std::vector<char>> outs;
  Vec a = random_vec(M * K, 80), b = random_vec(K * N, 81);
  auto pa = d.upload(a, t);
  auto pb = d.upload(b, t);
  auto pc = d.zeros(M * N * 4);
  MatmulArgs args;
  args.a = pa.data();
  args.b = pb.data();
  args.c = pc.data();
  args.dtype_ab = t;
  args.m = M;
  args.n = N;
  args.k = K;
  EXPECT_TRUE(d.k().matmul(d.stream(), args).ok());
  outs.push_back(d.download_bytes(pc, M * N * 4));

  auto pdb = d.zeros(N * 4);
  EXPECT_TRUE(
      d.k().bias_backward(d.stream(), pdb.data(), pc.data(), M, N, DType::kF32, false).ok());
  outs.push_back(d.download_bytes(pdb, N * 4));

  auto pss = d.zeros(8);
  EXPECT_TRUE(
      d.k().sum_squares(d.stream(), pss.as<float>(), pc.data(), M * N, DType::kF32, false).ok());
  outs.push_back(d.download_bytes(pss, 8));

  Vec x = random_vec(B * T * C, 82), w = random_vec(C, 83), g = random_vec(B * T * C, 84);
  auto px = d.upload(x, t);
  auto pw = d.upload(w, t);
  auto pg = d.upload(g, t);
  auto pout = d.zeros(B * T * C * 2);
  auto pmean = d.zeros(B * T * 4);
  auto prstd = d.zeros(B * T * 4);
  auto pdx = d.zeros(B * T * C * 2);
  auto pdw = d.zeros(C * 2);
  auto pdbias = d.zeros(C * 2);
  EXPECT_TRUE(d.k()
                  .layernorm_forward(d.stream(), pout.data(), pmean.as<float>(), prstd.as<float>(),
                                     px.data(), pw.data(), pw.data(), B * T, C, 1e-5f, t)
                  .ok());
  EXPECT_TRUE(d.k()
                  .layernorm_backward(d.stream(), pdx.data(), pdw.data(), pdbias.data(), pg.data(),
                                      px.data(), pw.data(), pmean.as<float>(), prstd.as<float>(),
                                      B * T, C, t)
                  .ok());
  outs.push_back(d.download_bytes(pdx, B * T * C * 2));
  outs.push_back(d.download_bytes(pdw, C * 2));
  outs.push_back(d.download_bytes(pdbias, C * 2));
  {  // RMSNorm's weight gradient: rows summed per column (in row chunks on CUDA)
    auto prms = d.zeros(B * T * C * 2);
    auto prstd2 = d.zeros(B * T * 4);
    auto pdx2 = d.zeros(B * T * C * 2);
    auto pdw2 = d.zeros(C * 2);
    EXPECT_TRUE(d.k()
                    .rmsnorm_forward(d.stream(), prms.data(), prstd2.as<float>(), px.data(),
                                     pw.data(), B * T, C, 1e-5f, t)
                    .ok());
    EXPECT_TRUE(d.k()
                    .rmsnorm_backward(d.stream(), pdx2.data(), pdw2.data(), pg.data(), px.data(),
                                      pw.data(), prstd2.as<float>(), B * T, C, t)
                    .ok());
    outs.push_back(d.download_bytes(pdx2, B * T * C * 2));
    outs.push_back(d.download_bytes(pdw2, C * 2));
  }

  Vec qkv = random_vec(B * T * 3 * C, 85);
  auto pqkv = d.upload(qkv, t);
  auto patt = d.zeros(B * T * C * 2);
  auto plse = d.zeros(B * NH * T * 4);
  auto pdqkv = d.zeros(B * T * 3 * C * 2);
  EXPECT_TRUE(d.k()
                  .attention_forward(d.stream(), patt.data(), plse.as<float>(), pqkv.data(), B, T,
                                     C, NH, NH, t)
                  .ok());
  EXPECT_TRUE(d.k()
                  .attention_backward(d.stream(), pdqkv.data(), pg.data(), pqkv.data(), patt.data(),
                                      plse.as<float>(), B, T, C, NH, NH, t)
                  .ok());
  outs.push_back(d.download_bytes(patt, B * T * C * 2));
  outs.push_back(d.download_bytes(pdqkv, B * T * 3 * C * 2));
  {  // head size 64: the CUDA backend's tensor-core kernels, over two 64-row blocks
    const int64_t T2 = 70, C2 = 128, NH2 = 2;
    Vec qkv2 = random_vec(B * T2 * 3 * C2, 86), g2 = random_vec(B * T2 * C2, 87);
    auto pqkv2 = d.upload(qkv2, t);
    auto pg2 = d.upload(g2, t);
    auto patt2 = d.zeros(B * T2 * C2 * 2);
    auto plse2 = d.zeros(B * NH2 * T2 * 4);
    auto pdqkv2 = d.zeros(B * T2 * 3 * C2 * 2);
    EXPECT_TRUE(d.k()
                    .attention_forward(d.stream(), patt2.data(), plse2.as<float>(), pqkv2.data(), B,
                                       T2, C2, NH2, NH2, t)
                    .ok());
    EXPECT_TRUE(d.k()
                    .attention_backward(d.stream(), pdqkv2.data(), pg2.data(), pqkv2.data(),
                                        patt2.data(), plse2.as<float>(), B, T2, C2, NH2, NH2, t)
                    .ok());
    outs.push_back(d.download_bytes(patt2, B * T2 * C2 * 2));
    outs.push_back(d.download_bytes(pdqkv2, B * T2 * 3 * C2 * 2));
  }

  {  // grouped-query attention (2 query heads a key/value head): dK and dV sum the group
    const int64_t T3 = 70, C3 = 256, NH3 = 4, NKV3 = 2, W3 = C3 + 2 * NKV3 * 64;
    Vec qkv3 = random_vec(B * T3 * W3, 88), g3 = random_vec(B * T3 * C3, 89);
    auto pqkv3 = d.upload(qkv3, t);
    auto pg3 = d.upload(g3, t);
    auto patt3 = d.zeros(B * T3 * C3 * 2);
    auto plse3 = d.zeros(B * NH3 * T3 * 4);
    auto pdqkv3 = d.zeros(B * T3 * W3 * 2);
    EXPECT_TRUE(d.k()
                    .attention_forward(d.stream(), patt3.data(), plse3.as<float>(), pqkv3.data(), B,
                                       T3, C3, NH3, NKV3, t)
                    .ok());
    EXPECT_TRUE(d.k()
                    .attention_backward(d.stream(), pdqkv3.data(), pg3.data(), pqkv3.data(),
                                        patt3.data(), plse3.as<float>(), B, T3, C3, NH3, NKV3, t)
                    .ok());
    outs.push_back(d.download_bytes(patt3, B * T3 * C3 * 2));
    outs.push_back(d.download_bytes(pdqkv3, B * T3 * W3 * 2));
  }

  std::vector<int32_t> tokens(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[i] = static_cast<int32_t>((i * i) % 7);
  auto ptok = d.upload_i32(tokens);
  auto pdwte = d.zeros(Vp * C * 2);
  auto pdwpe = d.zeros(T * C * 2);
  EXPECT_TRUE(d.k()
                  .embedding_backward(d.stream(), pdwte.data(), pdwpe.data(), pg.data(),
                                      ptok.as<int32_t>(), B, T, C, t)
                  .ok());
  outs.push_back(d.download_bytes(pdwte, Vp * C * 2));
  outs.push_back(d.download_bytes(pdwpe, T * C * 2));
  return outs;
}

TEST(KernelDeterminism, SameBitsEveryRun) {
  DeviceFixture d;
  d.open();
  if (!d.available()) GTEST_SKIP() << d.skip_reason();
  const auto first = run_reductions(d);
  const auto second = run_reductions(d);
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i], second[i]) << "output " << i;
}

TEST(KernelDeterminism, CpuSameBitsForAnyThreadCount) {
  if (cuda_kernels()) GTEST_SKIP() << "a CpuDevice property";
  std::vector<std::vector<std::vector<char>>> results;
  for (int threads : {1, 2, 5}) {
    DeviceOptions opt;
    opt.memory_limit_bytes = size_t{64} << 20;
    opt.threads = threads;
    auto dev = create_device(DeviceKind::kCpu, opt).value();
    DeviceFixture d;
    d.adopt(std::move(dev));
    results.push_back(run_reductions(d));
  }
  for (size_t r = 1; r < results.size(); ++r) {
    for (size_t i = 0; i < results[0].size(); ++i) {
      EXPECT_EQ(results[0][i], results[r][i]) << "output " << i << ", run " << r;
    }
  }
}

#if STRATA_TEST_SIMT
// Threads of a block that communicate without a barrier give different bits when the emulator
// resumes them in another order (simt.h).
TEST(KernelDeterminism, SimtSameBitsInEitherThreadOrder) {
  std::vector<std::vector<std::vector<char>>> results;
  for (simt::Order order : {simt::Order::kForward, simt::Order::kReverse}) {
    DeviceOptions opt;
    opt.memory_limit_bytes = size_t{64} << 20;
    DeviceFixture d;
    d.adopt(create_simt_device(opt, order).value());
    results.push_back(run_reductions(d));
  }
  for (size_t i = 0; i < results[0].size(); ++i) {
    EXPECT_EQ(results[0][i], results[1][i]) << "output " << i;
  }
}
#endif

}  // namespace
}  // namespace strata::gpu::test
