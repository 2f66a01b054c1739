// cpu/pinned_registry.h with a hook that records what it holds (as CUDA's cudaHostRegister
// would): every pinned buffer, made before or after the hook, is attached while it lives and
// detached before it is unmapped; buffers only the disk sees are not; and the engine's pinned
// memory (the plan's arena, the optimizer's host state and staging) comes from such buffers.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "cpu/pinned_memory.h"
#include "cpu/pinned_registry.h"
#include "engine/offloaded_optimizer.h"
#include "gpu/cpu_device.h"
#include "scheduler/executor.h"

namespace strata::cpu {
namespace {

// What a fake driver holds: address -> bytes.
struct FakeDriver {
  std::mutex mu;
  std::map<void*, size_t> held;
  int attached = 0, detached = 0;
  bool refuse = false;
  PinnedHook hook() {
    PinnedHook h;
    h.name = "fake";
    h.attach = [this](void* p, size_t n) -> Status {
      std::lock_guard lock(mu);
      if (refuse) return make_error(ErrorCode::kIo, "refused");
      EXPECT_EQ(held.count(p), 0u) << "registered twice";
      held[p] = n;
      ++attached;
      return ok_status();
    };
    h.detach = [this](void* p, size_t) {
      std::lock_guard lock(mu);
      EXPECT_EQ(held.erase(p), 1u) << "detached without being attached";
      ++detached;
    };
    return h;
  }
  // Whether [p, p + n) lies in one registered range.
  bool covers(const void* p, size_t n) {
    std::lock_guard lock(mu);
    for (const auto& [base, bytes] : held) {
      const auto* b = static_cast<const std::byte*>(base);
      const auto* q = static_cast<const std::byte*>(p);
      if (q >= b && q + n <= b + bytes) return true;
    }
    return false;
  }
};

struct HookGuard {
  explicit HookGuard(FakeDriver& d) { EXPECT_TRUE(install_pinned_hook(d.hook()).ok()); }
  ~HookGuard() { remove_pinned_hook(); }
};

TEST(PinnedRegistry, BuffersAreAttachedWhileTheyLiveBeforeOrAfterTheHook) {
  PinnedPool pool;
  auto before = pool.allocate(3 << 20);
  ASSERT_TRUE(before.ok());
  FakeDriver driver;
  {
    HookGuard guard(driver);
    EXPECT_TRUE(driver.covers(before->data(), before->size_bytes()));
    auto after = pool.allocate(8192);
    ASSERT_TRUE(after.ok());
    EXPECT_TRUE(driver.covers(after->data(), 8192));
    // Disk-only buffers are not the device's business.
    auto io = allocate_io_buffer(1 << 20);
    ASSERT_TRUE(io.ok());
    EXPECT_FALSE(driver.covers(io->data(), 1));
    // A moved buffer stays attached once; a released one is detached before it is unmapped.
    PinnedBuffer moved = std::move(after).value();
    EXPECT_TRUE(driver.covers(moved.data(), 8192));
    const int detached = driver.detached;
    moved = PinnedBuffer();
    EXPECT_EQ(driver.detached, detached + 1);
    EXPECT_EQ(attached_pinned_buffers(), live_pinned_buffers());
    // One backend per process.
    FakeDriver other;
    EXPECT_EQ(install_pinned_hook(other.hook()).code(), ErrorCode::kConfig);
  }
  EXPECT_TRUE(driver.held.empty());  // removing the hook detaches what it held
  EXPECT_EQ(attached_pinned_buffers(), 0u);
}

TEST(PinnedRegistry, ARefusedRegistrationLeavesTheBufferUsable) {
  FakeDriver driver;
  driver.refuse = true;
  HookGuard guard(driver);
  PinnedPool pool;
  auto b = pool.allocate(4096);
  ASSERT_TRUE(b.ok());
  b->as<char>()[0] = 1;
  EXPECT_EQ(driver.attached, 0);
}

// The engine's pinned memory is the pool's, so a device backend sees all of it.
TEST(PinnedRegistry, ThePlanArenaAndTheOptimizerStateAreAttached) {
  FakeDriver driver;
  HookGuard guard(driver);
  gpu::DeviceOptions o;
  o.memory_limit_bytes = 16 << 20;
  o.threads = 1;
  auto dev = gpu::create_cpu_device(o);
  ASSERT_TRUE(dev.ok());
  sched::Plan plan;
  const sched::BufferId host = plan.add_buffer("staging", sched::Tier::kPinnedHost, 1 << 20);
  const sched::TaskId t =
      plan.add("touch", sched::Lane::kCpu, [](const sched::TaskContext&) { return ok_status(); });
  plan.writes(t, host);
  ASSERT_TRUE(plan.finalize(sched::Budgets{}).ok());
  auto ex = sched::Executor::create(*dev.value(), std::move(plan));
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_TRUE(driver.covers(ex.value()->pinned_arena(), ex.value()->pinned_arena_bytes()));
  auto opt = engine::OffloadedOptimizer::create({1000, 3000}, CpuAdam(AdamHyper{}), {});
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  EXPECT_EQ(attached_pinned_buffers(), live_pinned_buffers());
  EXPECT_GE(driver.attached, 2);
}

}  // namespace
}  // namespace strata::cpu
