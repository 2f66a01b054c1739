// CpuDevice: the capped memory pool (out-of-memory Status, freeing, fragmentation, alignment)
// and a smoke test of the whole path (allocate, copy, kernel, copy back).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "gpu/kernels.h"

namespace strata::gpu {
namespace {

std::unique_ptr<Device> make_cpu(size_t limit_bytes, int threads = 0) {
  DeviceOptions opt;
  opt.memory_limit_bytes = limit_bytes;
  opt.threads = threads;
  auto dev = create_device(DeviceKind::kCpu, opt);
  EXPECT_TRUE(dev.ok()) << dev.status().to_string();
  return std::move(dev).value();
}

TEST(CpuDevice, SmokeMatmulRoundTrip) {
  auto dev = make_cpu(size_t{64} << 20);
  EXPECT_EQ(dev->kind(), DeviceKind::kCpu);
  auto stream = dev->create_stream().value();
  const int64_t M = 3, K = 5, N = 4;
  std::vector<float> a(M * K), b(K * N), c(M * N, -1.0f);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) - 3.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.5f;
  auto da = dev->allocate(a.size() * 4).value();
  auto db = dev->allocate(b.size() * 4).value();
  auto dc = dev->allocate(c.size() * 4).value();
  ASSERT_TRUE(stream->copy(da.data(), a.data(), a.size() * 4, CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(stream->copy(db.data(), b.data(), b.size() * 4, CopyKind::kHostToDevice).ok());
  MatmulArgs args;
  args.a = da.data();
  args.b = db.data();
  args.c = dc.data();
  args.m = M;
  args.n = N;
  args.k = K;
  ASSERT_TRUE(dev->kernels().matmul(*stream, args).ok());
  ASSERT_TRUE(stream->copy(c.data(), dc.data(), c.size() * 4, CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0;
      for (int64_t p = 0; p < K; ++p) ref += double(a[i * K + p]) * b[p * N + j];
      EXPECT_NEAR(c[i * N + j], ref, 1e-5) << i << "," << j;
    }
  }
}

TEST(CpuDevice, OverCapAllocationNamesRequestedInUseAndLimit) {
  const size_t limit = size_t{1} << 20;
  auto dev = make_cpu(limit);
  auto held = dev->allocate(300000).value();
  auto r = dev->allocate(900000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfMemory);
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find("requested 900000 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in use " + std::to_string(dev->memory_info().used_bytes) + " bytes"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("limit " + std::to_string(limit) + " bytes"), std::string::npos) << msg;
  // A request larger than the whole cap is refused the same way.
  auto huge = dev->allocate(limit * 4);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), ErrorCode::kOutOfMemory);
}

TEST(CpuDevice, FreeingReturnsBytesAndPeakIsKept) {
  const size_t limit = size_t{1} << 20;
  auto dev = make_cpu(limit);
  EXPECT_EQ(dev->memory_info().limit_bytes, limit);
  EXPECT_EQ(dev->memory_info().used_bytes, 0u);
  EXPECT_GT(dev->memory_info().physical_bytes, 0u);
  {
    auto a = dev->allocate(1000).value();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 256, 0u);
    EXPECT_GE(dev->memory_info().used_bytes, 1000u);
    auto b = dev->allocate(limit - 1024).value();  // exactly fills the rest (1000 -> 1024)
    EXPECT_EQ(dev->memory_info().used_bytes, limit);
    EXPECT_FALSE(dev->allocate(1).ok());
  }
  EXPECT_EQ(dev->memory_info().used_bytes, 0u);
  EXPECT_EQ(dev->memory_info().peak_bytes, limit);
  // The whole cap is one block again (coalesced).
  auto whole = dev->allocate(limit);
  EXPECT_TRUE(whole.ok()) << whole.status().to_string();
}

TEST(CpuDevice, FragmentationIsReportedAndCoalescingRecovers) {
  const size_t block = 64 * 1024;
  const size_t limit = 16 * block;
  auto dev = make_cpu(limit);
  std::vector<DeviceBuffer> bufs;
  for (int i = 0; i < 16; ++i) bufs.push_back(dev->allocate(block).value());
  // Free every other block: half the pool is free, but no two free blocks touch.
  for (int i = 0; i < 16; i += 2) bufs[i].reset();
  EXPECT_EQ(dev->memory_info().used_bytes, limit / 2);
  auto r = dev->allocate(2 * block);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(r.status().message().find("fragmented"), std::string::npos) << r.status().message();
  // A block-sized request still fits in a hole (best fit).
  auto fits = dev->allocate(block);
  EXPECT_TRUE(fits.ok());
  fits.value().reset();
  // Freeing the neighbours coalesces the holes into one run.
  bufs[1].reset();
  auto two = dev->allocate(3 * block);
  EXPECT_TRUE(two.ok()) << two.status().to_string();
}

TEST(CpuDevice, MoveOnlyBuffersReleaseOnce) {
  auto dev = make_cpu(size_t{1} << 20);
  auto a = dev->allocate(4096).value();
  DeviceBuffer b = std::move(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(b.size_bytes(), 4096u);
  DeviceBuffer c;
  c = std::move(b);
  EXPECT_EQ(dev->memory_info().used_bytes, 4096u);
  c.reset();
  EXPECT_EQ(dev->memory_info().used_bytes, 0u);
  auto zero = dev->allocate(0);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero.value().empty());
}

TEST(CpuDevice, BadOptionsAreRefused) {
  DeviceOptions opt;
  opt.threads = -2;
  auto r = create_device(DeviceKind::kCpu, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kConfig);
  DeviceOptions opt2;
  opt2.link_bytes_per_s = -1.0;
  EXPECT_FALSE(create_device(DeviceKind::kCpu, opt2).ok());
}

TEST(CpuDevice, NameAndDefaultLimit) {
  auto dev = make_cpu(0, 2);
  EXPECT_EQ(dev->name(), "cpu (2 threads)");
  EXPECT_EQ(dev->memory_info().limit_bytes, size_t{1} << 30);
}

}  // namespace
}  // namespace strata::gpu
