// Test harness: the same op on a CpuDevice (the reference, DESIGN.md §3) and a CudaDevice, on
// identical inputs, with a comparison of the outputs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gpu/cuda/cuda_backend.h"
#include "gpu/device.h"
#include "gpu/kernels.h"
#include "test_rng.h"

namespace strata::gpu::testing {

// One tensor allocated on both devices.
struct TwinBuf {
  DeviceBuffer cpu;
  DeviceBuffer gpu;
  size_t n = 0;
  DType t = DType::kF32;
  size_t bytes() const { return n * dtype_size(t); }
};

class Twin {
 public:
  // Skips the calling test when there is no GPU.
  static std::unique_ptr<Twin> make() {
    if (cuda::device_count() == 0) return nullptr;
    auto twin = std::make_unique<Twin>();
    DeviceOptions options;
    options.memory_limit_bytes = size_t{512} << 20;
    auto cpu = create_device(DeviceKind::kCpu, options);
    auto gpu = create_device(DeviceKind::kCuda, options);
    EXPECT_TRUE(cpu.ok()) << cpu.status().to_string();
    EXPECT_TRUE(gpu.ok()) << gpu.status().to_string();
    if (!cpu.ok() || !gpu.ok()) return nullptr;
    twin->cpu = std::move(cpu).value();
    twin->gpu = std::move(gpu).value();
    auto cs = twin->cpu->create_stream();
    auto gs = twin->gpu->create_stream();
    EXPECT_TRUE(cs.ok() && gs.ok());
    if (!cs.ok() || !gs.ok()) return nullptr;
    twin->cs = std::move(cs).value();
    twin->gs = std::move(gs).value();
    return twin;
  }

  TwinBuf alloc(size_t n, DType t) {
    TwinBuf b;
    b.n = n;
    b.t = t;
    const size_t bytes = std::max<size_t>(n * dtype_size(t), 1);
    auto c = cpu->allocate(bytes);
    auto g = gpu->allocate(bytes);
    EXPECT_TRUE(c.ok() && g.ok());
    if (c.ok()) b.cpu = std::move(c).value();
    if (g.ok()) b.gpu = std::move(g).value();
    return b;
  }
  // Writes the same raw bytes to both copies.
  void upload_raw(TwinBuf& b, const void* data, size_t bytes) {
    ASSERT_TRUE(cs->copy_now(b.cpu.data(), data, bytes, CopyKind::kHostToDevice).ok());
    ASSERT_TRUE(gs->copy_now(b.gpu.data(), data, bytes, CopyKind::kHostToDevice).ok());
    sync();
  }
  void upload(TwinBuf& b, const std::vector<float>& values) {
    ASSERT_EQ(values.size(), b.n);
    std::vector<unsigned char> raw(b.bytes());
    for (size_t i = 0; i < b.n; ++i) store_from_f32(raw.data(), b.t, i, values[i]);
    upload_raw(b, raw.data(), raw.size());
  }
  // n uniform values in [lo, hi).
  TwinBuf random(size_t n, DType t, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    TwinBuf b = alloc(n, t);
    upload(b, uniform(n, seed, lo, hi));
    return b;
  }
  static std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi) {
    TestRng rng(seed);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng.uniform(i);
    return v;
  }
  std::vector<unsigned char> download_raw(const TwinBuf& b, bool from_gpu) {
    std::vector<unsigned char> raw(b.bytes());
    Stream& s = from_gpu ? *gs : *cs;
    EXPECT_TRUE(s.copy_now(raw.data(), from_gpu ? b.gpu.data() : b.cpu.data(), raw.size(),
                           CopyKind::kDeviceToHost)
                    .ok());
    EXPECT_TRUE(s.synchronize().ok());
    return raw;
  }
  std::vector<float> download(const TwinBuf& b, bool from_gpu) {
    const auto raw = download_raw(b, from_gpu);
    std::vector<float> v(b.n);
    for (size_t i = 0; i < b.n; ++i) v[i] = load_as_f32(raw.data(), b.t, i);
    return v;
  }
  // Makes the GPU copy equal to the CPU copy (to feed both backwards identical inputs).
  void cpu_to_gpu(TwinBuf& b) {
    const auto raw = download_raw(b, false);
    ASSERT_TRUE(gs->copy_now(b.gpu.data(), raw.data(), raw.size(), CopyKind::kHostToDevice).ok());
    sync();
  }
  void sync() {
    ASSERT_TRUE(cs->synchronize().ok());
    Status st = gs->synchronize();
    ASSERT_TRUE(st.ok()) << st.to_string();
  }

  // Expects |gpu - cpu| <= rtol * |cpu| + rtol * max|cpu| elementwise (NaN matches NaN, Inf
  // matches the same Inf).
  void expect_close(const std::string& what, const TwinBuf& b, double rtol) {
    sync();
    const auto ref = download(b, false);
    const auto got = download(b, true);
    double max_abs = 0.0;
    for (float r : ref) {
      if (std::isfinite(r)) max_abs = std::max(max_abs, std::fabs(static_cast<double>(r)));
    }
    size_t bad = 0;
    double worst = 0.0;
    size_t worst_i = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double r = ref[i];
      const double g = got[i];
      if (std::isnan(r) || std::isinf(r)) {
        const bool same = std::isnan(r) ? std::isnan(g) : (g == r);
        if (!same) ++bad;
        continue;
      }
      const double err = std::fabs(g - r);
      const double tol = rtol * std::fabs(r) + rtol * max_abs;
      if (!(err <= tol)) {
        ++bad;
        if (!(err <= worst)) {
          worst = err;
          worst_i = i;
        }
      }
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << ref.size()
                       << " elements differ; worst at " << worst_i << ": cpu " << ref[worst_i]
                       << " cuda " << got[worst_i] << " (rtol " << rtol << ", max|cpu| " << max_abs
                       << ")";
  }

  std::unique_ptr<Device> cpu;
  std::unique_ptr<Device> gpu;
  std::unique_ptr<Stream> cs;
  std::unique_ptr<Stream> gs;
};

// Relative tolerance for results stored in `t` (a few units in the last place).
inline double tol_for(DType t) {
  switch (t) {
    case DType::kF32: return 2e-5;
    case DType::kF16: return 4e-3;
    case DType::kBF16: return 2e-2;
  }
  return 0.0;
}

inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

}  // namespace strata::gpu::testing

// Both devices run `call`, which names the kernels object `k`, the stream `s` and picks the
// device's copy of a TwinBuf with `P(buf)` (void*), `PF(buf)` (float*) or `PI(buf)` (int32_t*).
#define TWIN_RUN(twin, call)                                                                 \
  do {                                                                                       \
    for (int strata_side = 0; strata_side < 2; ++strata_side) {                              \
      const bool on_gpu = strata_side == 1;                                                  \
      Kernels& k = on_gpu ? (twin).gpu->kernels() : (twin).cpu->kernels();                   \
      Stream& s = on_gpu ? *(twin).gs : *(twin).cs;                                          \
      auto P = [on_gpu](const auto& twin_buf) {                                              \
        return on_gpu ? twin_buf.gpu.data() : twin_buf.cpu.data();                           \
      };                                                                                     \
      auto PF = [&P](const auto& twin_buf) { return static_cast<float*>(P(twin_buf)); };     \
      auto PI = [&P](const auto& twin_buf) { return static_cast<int32_t*>(P(twin_buf)); };   \
      (void)PF;                                                                              \
      (void)PI;                                                                              \
      Status strata_st = (call);                                                             \
      ASSERT_TRUE(strata_st.ok()) << (on_gpu ? "cuda: " : "cpu: ") << strata_st.to_string(); \
    }                                                                                        \
    (twin).sync();                                                                           \
  } while (0)
