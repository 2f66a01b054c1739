// CudaDevice: device counting without a GPU, and on a GPU the capped pool (alignment, the
// out-of-memory Status), copies, stream/event ordering and host callbacks.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#if defined(STRATA_CUDA_EMULATE) && STRATA_CUDA_EMULATE
#include "cuda_emu.h"
#endif
#include "cpu/pinned_memory.h"
#include "cpu/pinned_registry.h"
#include "gpu/cuda/cuda_backend.h"
#include "gpu/device.h"
#include "gpu/kernels.h"

namespace strata::gpu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
#ifndef STRATA_CUDA_EMULATE
#define STRATA_CUDA_EMULATE 0
#endif
// Built against the emulated CUDA runtime of tests/cuda_emu.
constexpr bool kEmulated = STRATA_CUDA_EMULATE != 0;

TEST(CudaDeviceCount, NeverFails) {
  const int n = cuda::device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(n, cuda_device_count());
  if (n == 0) {
    auto device = create_device(DeviceKind::kCuda);
    ASSERT_FALSE(device.ok());
    EXPECT_EQ(device.status().code(), ErrorCode::kUnsupported);
  }
}

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
    DeviceOptions options;
    options.memory_limit_bytes = 256 * kMiB;
    auto device = create_device(DeviceKind::kCuda, options);
    ASSERT_TRUE(device.ok()) << device.status().to_string();
    device_ = std::move(device).value();
  }
  std::unique_ptr<Stream> stream() {
    auto s = device_->create_stream();
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::unique_ptr<Device> device_;
};

// Once a CudaDevice exists every pinned buffer is registered with the driver (small ones, and
// large ones on huge pages), so that async copies from and to them are DMA; the driver agrees.
TEST_F(CudaDeviceTest, PinnedBuffersAreRegisteredWithTheDriver) {
  auto small = cpu::default_pinned_pool().allocate(64 << 10);
  auto large = cpu::default_pinned_pool().allocate(8 << 20);
  ASSERT_TRUE(small.ok() && large.ok());
  EXPECT_EQ(cpu::attached_pinned_buffers(), cpu::live_pinned_buffers());
  for (void* p : {small->data(), large->data()}) {
    unsigned flags = 0;
    EXPECT_EQ(cudaHostGetFlags(&flags, p), cudaSuccess) << "not registered: " << p;
  }
  (void)cudaGetLastError();
}

TEST_F(CudaDeviceTest, ReportsNameAndMemory) {
  EXPECT_EQ(device_->kind(), DeviceKind::kCuda);
  EXPECT_NE(device_->name().find("(sm_"), std::string::npos) << device_->name();
  const MemoryInfo info = device_->memory_info();
  EXPECT_EQ(info.limit_bytes, 256 * kMiB);
  EXPECT_GT(info.physical_bytes, info.limit_bytes);
}

TEST_F(CudaDeviceTest, PoolIsCappedAndAligned) {
  const size_t base_used = device_->memory_info().used_bytes;
  auto a = device_->allocate(100);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 256, 0u);
  auto big = device_->allocate(300 * kMiB);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), ErrorCode::kOutOfMemory);
  const std::string msg = big.status().message();
  EXPECT_NE(msg.find(std::to_string(300 * kMiB)), std::string::npos) << msg;       // requested
  EXPECT_NE(msg.find(std::to_string(256 * kMiB)), std::string::npos) << msg;       // limit
  EXPECT_NE(msg.find(std::to_string(base_used + 256)), std::string::npos) << msg;  // in use
  auto most = device_->allocate(200 * kMiB);
  ASSERT_TRUE(most.ok()) << most.status().to_string();
  EXPECT_GE(device_->memory_info().peak_bytes, 200 * kMiB);
  most->reset();
  a->reset();
  EXPECT_EQ(device_->memory_info().used_bytes, base_used);
}

TEST_F(CudaDeviceTest, CopyAndMemsetRoundTrip) {
  auto s = stream();
  ASSERT_TRUE(s);
  std::vector<int32_t> host(1 << 16);
  std::iota(host.begin(), host.end(), -1000);
  const size_t bytes = host.size() * sizeof(int32_t);
  auto d1 = device_->allocate(bytes);
  auto d2 = device_->allocate(bytes);
  ASSERT_TRUE(d1.ok() && d2.ok());
  std::vector<int32_t> back(host.size(), 0);
  ASSERT_TRUE(s->copy_now(d1->data(), host.data(), bytes, CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(s->copy(d2->data(), d1->data(), bytes, CopyKind::kDeviceToDevice).ok());
  ASSERT_TRUE(s->memset(d2->data(), 0xff, 64).ok());  // first 16 ints become -1
  ASSERT_TRUE(s->copy_now(back.data(), d2->data(), bytes, CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE(s->synchronize().ok());
  for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(back[i], i < 16 ? -1 : host[i]) << i;
}

// Stream 2 waits for an event recorded on stream 1 after a long chain of kernels; the data it
// copies back must be the final value, not an intermediate one.
TEST_F(CudaDeviceTest, WaitOrdersStreams) {
  auto s1 = stream();
  auto s2 = stream();
  ASSERT_TRUE(s1 && s2);
  auto event = device_->create_event();
  ASSERT_TRUE(event.ok());
  EXPECT_TRUE((*event)->query());  // never recorded
  // The emulated runtime runs every CUDA thread as a fiber: a shorter chain there.
  constexpr int64_t kN = kEmulated ? 1 << 12 : 1 << 20;
  constexpr int kRounds = kEmulated ? 20 : 200;
  auto x = device_->allocate(kN * sizeof(float));
  ASSERT_TRUE(x.ok());
  // Enqueued copies need pinned host memory (the emulated runtime's strict mode checks it).
  auto ones = cpu::default_pinned_pool().allocate(kN * sizeof(float));
  auto back = cpu::default_pinned_pool().allocate(kN * sizeof(float));
  ASSERT_TRUE(ones.ok() && back.ok());
  std::fill_n(ones->as<float>(), kN, 1.0f);
  ASSERT_TRUE(s1->copy(x->data(), ones->data(), kN * sizeof(float), CopyKind::kHostToDevice).ok());
  for (int i = 0; i < kRounds; ++i) {
    ASSERT_TRUE(device_->kernels().add(*s1, x->data(), x->data(), x->data(), kN, DType::kF32).ok());
    ASSERT_TRUE(device_->kernels().scale(*s1, x->data(), 0.5f, kN, DType::kF32).ok());
  }
  ASSERT_TRUE(device_->kernels().scale(*s1, x->data(), 3.0f, kN, DType::kF32).ok());
  ASSERT_TRUE(s1->record(**event).ok());
  ASSERT_TRUE(s2->wait(**event).ok());
  ASSERT_TRUE(s2->copy(back->data(), x->data(), kN * sizeof(float), CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE(s2->synchronize().ok());
  EXPECT_TRUE((*event)->query());
  ASSERT_TRUE((*event)->synchronize().ok());
  for (int64_t i = 0; i < kN; i += 4099) ASSERT_EQ(back->as<float>()[i], 3.0f) << i;
}

// cudaSetDevice only when the calling thread's device is another: a hundred memsets on one
// thread call it not once more (the emulated runtime counts the calls; a GPU's does not).
TEST_F(CudaDeviceTest, SetsTheDeviceOnlyWhenTheThreadHasAnother) {
  if (!kEmulated) GTEST_SKIP() << "counts the runtime's calls: the emulated runtime only";
#if defined(STRATA_CUDA_EMULATE) && STRATA_CUDA_EMULATE
  auto s = stream();
  ASSERT_TRUE(s);
  auto buf = device_->allocate(4096);
  ASSERT_TRUE(buf.ok()) << buf.status().to_string();
  ASSERT_TRUE(s->memset(buf->data(), 0, 4096).ok());
  ASSERT_TRUE(s->synchronize().ok());
  const uint64_t before = cuda_emu::counters().set_device_calls;
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(s->memset(buf->data(), i, 4096).ok());
  ASSERT_TRUE(s->synchronize().ok());
  EXPECT_EQ(cuda_emu::counters().set_device_calls - before, 0u);
  // A thread whose device is another (here: none chosen yet, the runtime's 0 is this one's
  // ordinal) is set once at most.
  std::thread other([&] {
    const uint64_t at = cuda_emu::counters().set_device_calls;
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(s->memset(buf->data(), i, 4096).ok());
    EXPECT_LE(cuda_emu::counters().set_device_calls - at, 1u);
  });
  other.join();
  ASSERT_TRUE(s->synchronize().ok());
#endif
}

TEST_F(CudaDeviceTest, HostCallbacksRunInStreamOrder) {
  auto s = stream();
  ASSERT_TRUE(s);
  std::mutex mu;
  std::vector<int> seen;
  auto buf = device_->allocate(4 * kMiB);
  ASSERT_TRUE(buf.ok());
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(s->memset(buf->data(), i, 4 * kMiB).ok());
    ASSERT_TRUE(s->host_callback([&mu, &seen, i] {
                   std::lock_guard<std::mutex> lock(mu);
                   seen.push_back(i);
                 }).ok());
  }
  ASSERT_TRUE(s->synchronize().ok());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST_F(CudaDeviceTest, RejectsForeignStreamsAndBadArguments) {
  auto cpu = create_device(DeviceKind::kCpu);
  ASSERT_TRUE(cpu.ok());
  auto cpu_stream = (*cpu)->create_stream();
  ASSERT_TRUE(cpu_stream.ok());
  auto x = device_->allocate(1024);
  ASSERT_TRUE(x.ok());
  Status st = device_->kernels().scale(**cpu_stream, x->data(), 2.0f, 16, DType::kF32);
  EXPECT_EQ(st.code(), ErrorCode::kConfig);
  auto s = stream();
  ASSERT_TRUE(s);
  st = device_->kernels().attention_forward(*s, x->data(), x->as<float>(), x->data(), 1, 4, 10, 3,
                                            3, DType::kF32);  // C not a multiple of NH
  EXPECT_EQ(st.code(), ErrorCode::kConfig);
  st = device_->kernels().gelu_forward(*s, nullptr, x->data(), 4, DType::kF32);
  EXPECT_EQ(st.code(), ErrorCode::kConfig);
  EXPECT_TRUE(s->synchronize().ok());
}

TEST(CudaDeviceCreate, RefusesAPoolLargerThanTheGpu) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  DeviceOptions options;
  options.memory_limit_bytes = size_t{1} << 50;  // 1 PiB
  auto device = create_device(DeviceKind::kCuda, options);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), ErrorCode::kOutOfMemory) << device.status().to_string();
}

}  // namespace
}  // namespace strata::gpu
