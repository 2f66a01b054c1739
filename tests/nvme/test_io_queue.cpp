// IoQueue::wake(): another thread ends the owner's blocking reap() early, so work handed to the
// owner reaches the kernel without waiting for a completion. A read from an empty pipe stays in
// flight until the test writes to it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "nvme/io_queue.h"

namespace strata::nvme {
namespace {

TEST(IoQueue, WakeEndsABlockingReapWithoutACompletion) {
  IoQueueOptions options;
  options.engine = IoEngine::kUring;
  options.queue_depth = 4;
  auto q = IoQueue::create(options);
  if (!q.ok()) GTEST_SKIP() << "no io_uring here: " << q.status().to_string();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  char got[8] = {};
  ASSERT_TRUE(q->submit(IoRequest{fds[0], IoOp::kRead, got, 4, 0, 42}).ok());
  ASSERT_TRUE(q->flush().ok());

  std::vector<IoCompletion> out;
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    q->wake();
  });
  ASSERT_TRUE(q->reap(out, /*wait=*/true).ok());  // without the wake-up: blocks for ever
  waker.join();
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(q->in_flight(), 1u);

  // A wake-up before the wait ends the next wait too; the one after it blocks until data.
  q->wake();
  ASSERT_TRUE(q->reap(out, true).ok());
  EXPECT_TRUE(out.empty());
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(write(fds[1], "abcd", 4), 4);
  });
  ASSERT_TRUE(q->reap(out, true).ok());
  writer.join();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tag, 42u);
  EXPECT_TRUE(out[0].status.ok()) << out[0].status.to_string();
  EXPECT_EQ(std::string(got, 4), "abcd");
  EXPECT_EQ(q->in_flight(), 0u);
  close(fds[0]);
  close(fds[1]);
}

TEST(IoQueue, WakeOfTheThreadPoolEngine) {
  IoQueueOptions options;
  options.engine = IoEngine::kThreadPool;
  auto q = IoQueue::create(options);
  ASSERT_TRUE(q.ok());
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  // pread on a pipe fails (ESPIPE) at once: a completion, not a hang; a wake-up before the
  // wait is harmless and the failure is still reported.
  char got[4];
  ASSERT_TRUE(q->submit(IoRequest{fds[0], IoOp::kRead, got, 4, 0, 7}).ok());
  ASSERT_TRUE(q->flush().ok());
  q->wake();
  std::vector<IoCompletion> out;
  while (q->in_flight() > 0) ASSERT_TRUE(q->reap(out, true).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].status.ok());
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace strata::nvme
