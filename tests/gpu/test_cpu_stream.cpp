// CpuDevice streams and events: in-order execution, real completion events, errors reported at
// synchronize, the link throttle, and the race harness: a program that omits a needed event wait
// must be caught by the result check, while the correct program gives the right result.
//
// Making the race deterministic without a C++ data race (so the suite is also clean under the
// thread sanitizer): the producer stream is held by a host_callback that blocks on a gate the test
// opens only after the consumer stream has finished (its synchronize returned). The consumer's
// read therefore happens-before the producer's write (through the stream and gate mutexes), the
// consumer deterministically reads the stale input, and the result check must report it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <thread>
#include <vector>

#include "gpu/device.h"
#include "gpu/kernels.h"

namespace strata::gpu {
namespace {

constexpr int64_t kN = 50000;

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceOptions opt;
    opt.memory_limit_bytes = size_t{64} << 20;
    dev_ = create_device(DeviceKind::kCpu, opt).value();
  }
  std::vector<float> read(const DeviceBuffer& b, int64_t n, Stream& s) {
    std::vector<float> h(n);
    EXPECT_TRUE(s.copy(h.data(), b.data(), n * 4, CopyKind::kDeviceToHost).ok());
    EXPECT_TRUE(s.synchronize().ok());
    return h;
  }
  DeviceBuffer filled(float v, int64_t n, Stream& s) {
    std::vector<float> h(n, v);
    auto b = dev_->allocate(n * 4).value();
    EXPECT_TRUE(s.copy(b.data(), h.data(), n * 4, CopyKind::kHostToDevice).ok());
    EXPECT_TRUE(s.synchronize().ok());
    return b;
  }
  std::unique_ptr<Device> dev_;
};

// The harness's result check: number of elements of out that differ from `want`.
int64_t count_wrong(const std::vector<float>& out, float want) {
  int64_t wrong = 0;
  for (float v : out) wrong += v != want;
  return wrong;
}

// Producer on stream A (held at a gate, then x *= 3), consumer on stream B (out = x + y).
// Returns the consumer's output; with_wait chooses whether B waits for A's event.
std::vector<float> run_producer_consumer(Device& dev, bool with_wait) {
  auto a = dev.create_stream().value();
  auto b = dev.create_stream().value();
  auto ev = dev.create_event().value();
  std::vector<float> hx(kN, 1.0f), hy(kN, 10.0f), hout(kN, 0.0f);
  auto x = dev.allocate(kN * 4).value();
  auto y = dev.allocate(kN * 4).value();
  auto out = dev.allocate(kN * 4).value();
  EXPECT_TRUE(a->copy(x.data(), hx.data(), kN * 4, CopyKind::kHostToDevice).ok());
  EXPECT_TRUE(a->copy(y.data(), hy.data(), kN * 4, CopyKind::kHostToDevice).ok());
  EXPECT_TRUE(a->synchronize().ok());

  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  EXPECT_TRUE(a->host_callback([opened] { opened.wait(); }).ok());
  EXPECT_TRUE(dev.kernels().scale(*a, x.data(), 3.0f, kN, DType::kF32).ok());
  EXPECT_TRUE(a->record(*ev).ok());
  EXPECT_FALSE(ev->query());  // A is held at the gate

  if (with_wait) {
    EXPECT_TRUE(b->wait(*ev).ok());
  }
  EXPECT_TRUE(dev.kernels().add(*b, out.data(), x.data(), y.data(), kN, DType::kF32).ok());
  EXPECT_TRUE(b->copy(hout.data(), out.data(), kN * 4, CopyKind::kDeviceToHost).ok());
  if (!with_wait) {
    // The consumer runs ahead: let it finish before the producer may start.
    EXPECT_TRUE(b->synchronize().ok());
    gate.set_value();
  } else {
    // B is blocked on the event; open the gate so A can produce, then B consumes.
    gate.set_value();
    EXPECT_TRUE(b->synchronize().ok());
  }
  EXPECT_TRUE(ev->synchronize().ok());
  EXPECT_TRUE(ev->query());
  EXPECT_TRUE(a->synchronize().ok());
  return hout;
}

TEST_F(StreamTest, EventWaitOrdersProducerBeforeConsumer) {
  const auto out = run_producer_consumer(*dev_, /*with_wait=*/true);
  EXPECT_EQ(count_wrong(out, 13.0f), 0);
}

TEST_F(StreamTest, HarnessCatchesAMissingEventWait) {
  const auto out = run_producer_consumer(*dev_, /*with_wait=*/false);
  // The consumer read x before the producer scaled it: every element is 1 + 10, not 3 + 10.
  EXPECT_EQ(count_wrong(out, 13.0f), kN) << "the result check must see the missing dependency";
  EXPECT_EQ(count_wrong(out, 11.0f), 0);
}

TEST_F(StreamTest, WorkOnOneStreamRunsInOrder) {
  auto s = dev_->create_stream().value();
  auto x = filled(1.0f, kN, *s);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(dev_->kernels().scale(*s, x.data(), 2.0f, kN, DType::kF32).ok());
    ASSERT_TRUE(dev_->kernels().add(*s, x.data(), x.data(), x.data(), kN, DType::kF32).ok());
  }
  // ((1 * 2) * 2) repeated 20 times = 4^20, exact in fp32.
  EXPECT_EQ(count_wrong(read(x, kN, *s), std::ldexp(1.0f, 40)), 0);
}

TEST_F(StreamTest, EventsChainAcrossManyStreams) {
  // A ring of 4 streams passes a buffer around 12 times; each hop scales by 2 after waiting for
  // the previous hop's event. Any missing ordering would give a wrong power of two.
  constexpr int kStreams = 4;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::unique_ptr<Event>> events;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(dev_->create_stream().value());
    events.push_back(dev_->create_event().value());
  }
  auto x = filled(1.0f, kN, *streams[0]);
  for (int hop = 0; hop < 12; ++hop) {
    Stream& s = *streams[hop % kStreams];
    if (hop > 0) {
      ASSERT_TRUE(s.wait(*events[(hop - 1) % kStreams]).ok());
    }
    ASSERT_TRUE(dev_->kernels().scale(s, x.data(), 2.0f, kN, DType::kF32).ok());
    ASSERT_TRUE(s.record(*events[hop % kStreams]).ok());
  }
  ASSERT_TRUE(streams[0]->wait(*events[11 % kStreams]).ok());
  EXPECT_EQ(count_wrong(read(x, kN, *streams[0]), 4096.0f), 0);
  EXPECT_TRUE(dev_->synchronize().ok());
}

TEST_F(StreamTest, NeverRecordedEventIsComplete) {
  auto ev = dev_->create_event().value();
  EXPECT_TRUE(ev->query());
  EXPECT_TRUE(ev->synchronize().ok());
  auto s = dev_->create_stream().value();
  EXPECT_TRUE(s->wait(*ev).ok());  // no-op
  EXPECT_TRUE(s->synchronize().ok());
}

TEST_F(StreamTest, RunTimeErrorsSurfaceAtSynchronizeAndInLaterEvents) {
  auto s = dev_->create_stream().value();
  auto ev = dev_->create_event().value();
  std::vector<int32_t> targets = {0, 99};  // 99 >= V: found only while running
  auto t = dev_->allocate(8).value();
  auto logits = dev_->allocate(2 * 4 * 4).value();
  auto losses = dev_->allocate(8).value();
  ASSERT_TRUE(s->copy(t.data(), targets.data(), 8, CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(s->memset(logits.data(), 0, 32).ok());
  ASSERT_TRUE(dev_->kernels()
                  .softmax_cross_entropy(*s, losses.as<float>(), logits.data(), t.as<int32_t>(), 2,
                                         4, 4, 1.0f, DType::kF32)
                  .ok());  // enqueue succeeds
  ASSERT_TRUE(s->record(*ev).ok());
  const Status evst = ev->synchronize();
  EXPECT_FALSE(evst.ok());
  const Status st = s->synchronize();
  EXPECT_EQ(st.code(), ErrorCode::kConfig) << st.to_string();
  EXPECT_TRUE(s->synchronize().ok()) << "an error is reported once";
}

TEST_F(StreamTest, DeviceSynchronizeWaitsForEveryStream) {
  auto s1 = dev_->create_stream().value();
  auto s2 = dev_->create_stream().value();
  std::atomic<int> done{0};
  for (auto* s : {s1.get(), s2.get()}) {
    ASSERT_TRUE(s->host_callback([&done] {
                   std::this_thread::sleep_for(std::chrono::milliseconds(20));
                   done.fetch_add(1);
                 }).ok());
  }
  ASSERT_TRUE(dev_->synchronize().ok());
  EXPECT_EQ(done.load(), 2);
}

TEST(CpuLink, ThrottledCopiesTakeAtLeastBytesOverRate) {
  // A lower bound only (sleeping never ends early), so this cannot flake on a slow machine.
  DeviceOptions opt;
  opt.memory_limit_bytes = size_t{16} << 20;
  opt.link_bytes_per_s = 100e6;  // 100 MB/s: 4 MB takes >= 40 ms
  auto dev = create_device(DeviceKind::kCpu, opt).value();
  auto s = dev->create_stream().value();
  auto buf = dev->allocate(size_t{4} << 20).value();
  std::vector<char> host(size_t{4} << 20, 1);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(s->copy(buf.data(), host.data(), host.size(), CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(s->synchronize().ok());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(secs, 0.95 * static_cast<double>(host.size()) / opt.link_bytes_per_s);
  // Device-to-device copies are not on the link.
  auto other = dev->allocate(size_t{4} << 20).value();
  ASSERT_TRUE(s->copy(other.data(), buf.data(), host.size(), CopyKind::kDeviceToDevice).ok());
  ASSERT_TRUE(s->synchronize().ok());
}

}  // namespace
}  // namespace strata::gpu
