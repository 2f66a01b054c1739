// Kernels::adam_step against the CPU Adam (cpu::CpuAdam::step) on the same inputs: bit for bit on
// the CpuDevice and on the CUDA kernel run by the SIMT emulator (the same IEEE operations in the
// same order); within a few ulps on a GPU. Gradients of each dtype (the test parameter), 16-bit
// copies of the new params, Adam with L2 and AdamW, a gradient scale, bias correction at step 3.
#include <cstring>
#include <random>
#include <vector>

#include "cpu/cpu_adam.h"
#include "kernel_test_util.h"

namespace strata::gpu::test {
namespace {

template <typename T>
std::vector<T> random_bits(size_t n, uint32_t seed, float lo, float hi, DType t) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> out(n);
  for (auto& x : out) {
    const float f = dist(gen);
    if constexpr (sizeof(T) == 4) {
      x = f;
    } else {
      x = t == DType::kF16 ? f32_to_f16(f) : f32_to_bf16(f);
    }
  }
  return out;
}

TEST_P(KernelTest, AdamStepMatchesTheCpuAdam) {
  const int64_t n = 10007;
  const DType gt = dt();
  const DType out_t = gt == DType::kF32 ? DType::kBF16 : gt;
  for (cpu::AdamMode mode : {cpu::AdamMode::kAdamW, cpu::AdamMode::kAdam}) {
    cpu::AdamHyper h;
    h.lr = 1e-2f;
    h.weight_decay = 0.05f;
    h.mode = mode;
    const cpu::CpuAdam adam(h);
    const cpu::AdamStep step{3, 0.5f};
    auto k = adam.constants(step);
    ASSERT_TRUE(k.ok());
    std::vector<float> p = random_bits<float>(n, 1, -1.f, 1.f, DType::kF32);
    std::vector<float> m = random_bits<float>(n, 2, -0.1f, 0.1f, DType::kF32);
    std::vector<float> v = random_bits<float>(n, 3, 0.f, 0.01f, DType::kF32);
    std::vector<char> g(static_cast<size_t>(n) * dtype_size(gt));
    if (gt == DType::kF32) {
      auto gf = random_bits<float>(n, 4, -2.f, 2.f, gt);
      std::memcpy(g.data(), gf.data(), g.size());
    } else {
      auto g16 = random_bits<uint16_t>(n, 4, -2.f, 2.f, gt);
      std::memcpy(g.data(), g16.data(), g.size());
    }
    auto dp = d_.upload_bytes(p.data(), p.size() * 4);
    auto dm = d_.upload_bytes(m.data(), m.size() * 4);
    auto dv = d_.upload_bytes(v.data(), v.size() * 4);
    auto dg = d_.upload_bytes(g.data(), g.size());
    auto dout = d_.zeros(static_cast<size_t>(n) * 2);
    AdamArgs a;
    a.params = dp.as<float>();
    a.exp_avg = dm.as<float>();
    a.exp_avg_sq = dv.as<float>();
    a.grads = dg.data();
    a.grad_dtype = gt;
    a.out16 = dout.data();
    a.out_dtype = out_t;
    a.numel = n;
    a.constants = *k;
    ASSERT_TRUE(d_.k().adam_step(d_.stream(), a).ok());
    // The reference: the CPU Adam on host copies.
    std::vector<uint16_t> out16(static_cast<size_t>(n));
    ASSERT_TRUE(adam.step(cpu::AdamBuffers{p.data(), m.data(), v.data(), g.data(), gt, out16.data(),
                                           out_t, n},
                          step)
                    .ok());
    const auto got_p = d_.download_bytes(dp, p.size() * 4);
    const auto got_m = d_.download_bytes(dm, m.size() * 4);
    const auto got_v = d_.download_bytes(dv, v.size() * 4);
    const auto got_o = d_.download_bytes(dout, out16.size() * 2);
    const char* what = mode == cpu::AdamMode::kAdamW ? "AdamW" : "Adam";
    if (tested_kind() == DeviceKind::kCuda) {
      // On a GPU: within rounding (a few ulps of fp32).
      for (int64_t i = 0; i < n; ++i) {
        float gp;
        std::memcpy(&gp, got_p.data() + 4 * i, 4);
        ASSERT_NEAR(gp, p[size_t(i)], 4e-7 * (1.0 + std::abs(p[size_t(i)]))) << what << " " << i;
      }
    } else {
      EXPECT_EQ(std::memcmp(got_p.data(), p.data(), got_p.size()), 0) << what << " params";
      EXPECT_EQ(std::memcmp(got_m.data(), m.data(), got_m.size()), 0) << what << " m";
      EXPECT_EQ(std::memcmp(got_v.data(), v.data(), got_v.size()), 0) << what << " v";
      EXPECT_EQ(std::memcmp(got_o.data(), out16.data(), got_o.size()), 0) << what << " out16";
    }
  }
}

TEST_P(KernelTest, AdamStepRefusesBadArguments) {
  auto buf = d_.zeros(64);
  AdamArgs a;
  a.params = buf.as<float>();
  a.exp_avg = buf.as<float>();
  a.exp_avg_sq = buf.as<float>();
  a.grads = buf.data();
  a.grad_dtype = dt();
  a.numel = -1;
  EXPECT_EQ(d_.k().adam_step(d_.stream(), a).code(), ErrorCode::kConfig);
  a.numel = 4;
  a.exp_avg = nullptr;
  EXPECT_EQ(d_.k().adam_step(d_.stream(), a).code(), ErrorCode::kConfig);
  a.exp_avg = buf.as<float>();
  a.out16 = buf.data();
  a.out_dtype = DType::kF32;  // the copy must be 16-bit
  EXPECT_EQ(d_.k().adam_step(d_.stream(), a).code(), ErrorCode::kConfig);
  d_.sync();
}

}  // namespace
}  // namespace strata::gpu::test
