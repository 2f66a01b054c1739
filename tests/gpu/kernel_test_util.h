// Shared fixture of the kernel conformance tests: the device under test (a CpuDevice in
// test_kernels_cpu, a CudaDevice in test_kernels_gpu chosen by STRATA_TEST_CUDA, the CUDA kernels
// on the SIMT emulator in test_kernels_simt chosen by STRATA_TEST_SIMT), upload and download with
// rounding to the tested dtype, random data and the comparison with tolerances.
//
// Tolerances (relative to max(|ref|) + |ref| of the tensor, i.e. normwise): the float64 reference
// is computed from the inputs exactly as stored (already rounded to the dtype), so the kernel's
// error is its fp32 arithmetic plus the final rounding of 16-bit outputs.
//  - fp32: 1e-5 (fp32 eps 1.2e-7 times sums of up to ~10^2 terms, with margin);
//  - fp16: 2e-3 (half-ulp 2^-11 = 4.9e-4 for the output rounding, plus values read back that
//    were themselves rounded, e.g. an accumulated gradient);
//  - bf16: 1e-2 (half-ulp 2^-8 = 3.9e-3, same reasoning).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "gpu/kernels.h"
#include "kernel_reference.h"
#include "tested_device.h"

namespace strata::gpu::test {

using ref::Vec;

inline double tolerance(DType t) {
  switch (t) {
    case DType::kF32: return 1e-5;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 1e-2;
  }
  return 0.0;
}

inline double round_to(DType t, double v) {
  const float f = static_cast<float>(v);
  switch (t) {
    case DType::kF32: return f;
    case DType::kF16: return f16_to_f32(f32_to_f16(f));
    case DType::kBF16: return bf16_to_f32(f32_to_bf16(f));
  }
  return v;
}

inline Vec random_vec(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Expects |got - ref| <= tol * (|ref| + max|ref|) elementwise; reports the first few misses.
inline void expect_close(const Vec& got, const Vec& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double scale = 0.0;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  int misses = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double bound = tol * (std::abs(ref[i]) + scale) + 1e-30;
    if (!(std::abs(got[i] - ref[i]) <= bound)) {
      if (++misses <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", reference " << ref[i]
                      << ", |diff| " << std::abs(got[i] - ref[i]) << " > " << bound;
      }
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << ref.size() << " elements differ";
}

class DeviceFixture {
 public:
  // Creates the device under test, or leaves a skip reason.
  void open() {
    DeviceOptions opt;
    opt.memory_limit_bytes = size_t{256} << 20;
    device_ = open_tested_device(opt, skip_reason_);
    if (device_ != nullptr) stream_ = device_->create_stream().value();
  }
  // Uses an existing device (e.g. a CpuDevice with a chosen thread count).
  void adopt(std::unique_ptr<Device> dev) {
    device_ = std::move(dev);
    stream_ = device_->create_stream().value();
  }
  void close() {
    stream_.reset();
    device_.reset();
  }
  bool available() const { return device_ != nullptr; }
  const std::string& skip_reason() const { return skip_reason_; }
  Device& device() { return *device_; }
  Stream& stream() { return *stream_; }
  Kernels& k() { return device_->kernels(); }

  void sync() {
    const Status st = stream_->synchronize();
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  // Rounds `values` in place to dtype t and uploads them.
  DeviceBuffer upload(Vec& values, DType t) {
    for (auto& v : values) v = round_to(t, v);
    std::vector<char> host(values.size() * dtype_size(t) + 1);
    for (size_t i = 0; i < values.size(); ++i) {
      store_from_f32(host.data(), t, i, static_cast<float>(values[i]));
    }
    return upload_bytes(host.data(), values.size() * dtype_size(t));
  }
  DeviceBuffer upload_i32(const std::vector<int32_t>& v) {
    return upload_bytes(v.data(), v.size() * 4);
  }
  DeviceBuffer upload_bytes(const void* p, size_t bytes) {
    auto buf = device_->allocate(bytes == 0 ? 4 : bytes).value();
    EXPECT_TRUE(stream_->copy_now(buf.data(), p, bytes, CopyKind::kHostToDevice).ok());
    sync();
    return buf;
  }
  DeviceBuffer zeros(size_t bytes) {
    auto buf = device_->allocate(bytes).value();
    EXPECT_TRUE(stream_->memset(buf.data(), 0, bytes).ok());
    return buf;
  }
  Vec download(const DeviceBuffer& buf, size_t n, DType t) {
    std::vector<char> host(n * dtype_size(t) + 1);
    EXPECT_TRUE(
        stream_->copy_now(host.data(), buf.data(), n * dtype_size(t), CopyKind::kDeviceToHost)
            .ok());
    sync();
    Vec out(n);
    for (size_t i = 0; i < n; ++i) out[i] = load_as_f32(host.data(), t, i);
    return out;
  }
  std::vector<char> download_bytes(const DeviceBuffer& buf, size_t bytes) {
    std::vector<char> host(bytes);
    EXPECT_TRUE(stream_->copy_now(host.data(), buf.data(), bytes, CopyKind::kDeviceToHost).ok());
    sync();
    return host;
  }

 private:
  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::string skip_reason_;
};

// Parameterised over the dtype; each test gets a fresh device.
class KernelTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    d_.open();
    if (!d_.available()) GTEST_SKIP() << d_.skip_reason();
  }
  void TearDown() override { d_.close(); }
  DType dt() const { return GetParam(); }
  double tol() const { return tolerance(GetParam()); }
  DeviceFixture d_;
};

// The fp32 backwards against finite differences of the float64 forwards: kernel gradients are
// fp32; finite differences of the float64 forward are accurate to ~1e-9.
inline constexpr double kFdTol = 1e-4;
class FdFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    d_.open();
    if (!d_.available()) GTEST_SKIP() << d_.skip_reason();
  }
  void TearDown() override { d_.close(); }
  DeviceFixture d_;
  const DType f32_ = DType::kF32;
};

// Central differences of a scalar function of x (float64), all elements.
template <typename F>
Vec finite_difference(F&& loss, Vec x, double h = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss(x);
    x[i] = keep - h;
    const double down = loss(x);
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

}  // namespace strata::gpu::test
