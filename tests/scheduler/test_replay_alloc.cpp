// The replay path allocates nothing on the heap: this binary replaces operator new with a
// counting one and replays a plan over the host lanes (cpu, nvme, comm) with dependencies,
// buffers and the trace on. (Stream lanes are left out: a CpuStream's own queue allocates one
// std::function per work item, which is the device's business, not the scheduler's; on CUDA the
// same enqueues allocate nothing but the host-callback wrapper.)
#include <gtest/gtest.h>

// The replacement pairs malloc with free; GCC cannot see that across the inlined gtest code.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <atomic>
#include <cstdlib>
#include <new>

#include "gpu/cpu_device.h"
#include "scheduler/executor.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace strata::sched {
namespace {

TEST(Replay, AllocatesNothingOnTheHeap) {
  gpu::DeviceOptions o;
  o.memory_limit_bytes = 16 << 20;
  auto dev = gpu::create_cpu_device(o);
  ASSERT_TRUE(dev.ok());
  Plan p;
  std::vector<BufferId> bufs;
  std::vector<TaskId> level;
  for (int i = 0; i < 6; ++i) {
    const BufferId buf = p.add_buffer("x" + std::to_string(i), Tier::kPinnedHost, 4096);
    const TaskId t = p.add("produce" + std::to_string(i), i % 2 ? Lane::kNvme : Lane::kCpu,
                           [=](const TaskContext& c) {
                             *static_cast<float*>(c.buffer(buf)) = static_cast<float>(c.step);
                             return ok_status();
                           });
    p.writes(t, buf);
    level.push_back(t);
    bufs.push_back(buf);
  }
  const TaskId reduce = p.add(
      "reduce", Lane::kComm,
      [=](const TaskContext& c) {
        float sum = 0;
        for (BufferId b : bufs) sum += *static_cast<float*>(c.buffer(b));
        return sum == 6.0f * static_cast<float>(c.step)
                   ? ok_status()
                   : make_error(ErrorCode::kInternal, "wrong sum ", sum);
      },
      level);
  for (BufferId b : bufs) p.reads(reduce, b);
  p.add("after", Lane::kCpu, [](const TaskContext&) { return ok_status(); }, {reduce});
  const Status planned = p.finalize();
  ASSERT_TRUE(planned.ok()) << planned.to_string();
  auto ex = Executor::create(*dev.value(), std::move(p));
  ASSERT_TRUE(ex.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ex.value()->replay().ok());  // warm-up
  g_allocations = 0;
  g_counting = true;
  Status st;
  for (int i = 0; i < 50 && st.ok(); ++i) st = ex.value()->replay();
  g_counting = false;
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(g_allocations.load(), 0);
}

}  // namespace
}  // namespace strata::sched
