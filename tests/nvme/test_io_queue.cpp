// IoQueue::wake(): another thread ends the owner's blocking reap() early, so work handed to the
// owner reaches the kernel without waiting for a completion. A read from an empty pipe stays in
// flight until the test writes to it.
// An engine that refuses a request (a first submission or a short transfer's rest): the queue
// stays consistent, and every other request of the batch is still reported.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nvme/io_queue.h"
#include "scratch_dir.h"

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

// A file of `bytes` bytes whose byte i is (i * 7 + i / 4096) % 251: any misplaced block shows.
int make_patterned_file(const std::string& path, size_t bytes, std::vector<char>& content) {
  content.resize(bytes);
  for (size_t i = 0; i < bytes; ++i) content[i] = static_cast<char>((i * 7 + i / 4096) % 251);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return -1;
  if (pwrite(fd, content.data(), bytes, 0) != static_cast<ssize_t>(bytes)) {
    close(fd);
    return -1;
  }
  return fd;
}

class IoQueueRefusal : public ::testing::TestWithParam<IoEngine> {};

TEST_P(IoQueueRefusal, ARefusedSubmissionLeavesItsSlotFree) {
  IoQueueOptions options;
  options.engine = GetParam();
  options.queue_depth = 2;
  auto q = IoQueue::create(options);
  if (!q.ok()) GTEST_SKIP() << "engine not available here: " << q.status().to_string();
  test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  std::vector<char> content;
  const int fd = make_patterned_file(dir.path() + "/f", 3 * 8192, content);
  ASSERT_GE(fd, 0);

  // The second request is refused: nothing of it stays in flight, and its slot takes the next.
  q->set_fault_injection(FaultInjection{0, FaultKind::kEio, 2});
  std::vector<char> got(3 * 8192);
  ASSERT_TRUE(q->submit(IoRequest{fd, IoOp::kRead, got.data(), 8192, 0, 1}).ok());
  const Status refused = q->submit(IoRequest{fd, IoOp::kRead, got.data() + 8192, 8192, 8192, 2});
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(q->in_flight(), 1u);
  EXPECT_TRUE(q->can_submit());
  ASSERT_TRUE(q->submit(IoRequest{fd, IoOp::kRead, got.data() + 16384, 8192, 16384, 3}).ok());
  EXPECT_FALSE(q->can_submit());
  ASSERT_TRUE(q->flush().ok());
  std::vector<IoCompletion> out;
  while (q->in_flight() > 0) ASSERT_TRUE(q->reap(out, true).ok());
  ASSERT_EQ(out.size(), 2u);
  for (const auto& c : out) {
    EXPECT_TRUE(c.status.ok()) << c.status.to_string();
    EXPECT_TRUE(c.tag == 1 || c.tag == 3) << c.tag;
  }
  EXPECT_EQ(std::memcmp(got.data(), content.data(), 8192), 0);
  EXPECT_EQ(std::memcmp(got.data() + 16384, content.data() + 16384, 8192), 0);
  close(fd);
}

TEST_P(IoQueueRefusal, ARefusedResubmissionFailsThatRequestOnly) {
  IoQueueOptions options;
  options.engine = GetParam();
  options.queue_depth = 4;
  auto q = IoQueue::create(options);
  if (!q.ok()) GTEST_SKIP() << "engine not available here: " << q.status().to_string();
  test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  constexpr size_t kRequests = 4;
  constexpr size_t kBytes = 16384;
  std::vector<char> content;
  const int fd = make_patterned_file(dir.path() + "/f", kRequests * kBytes, content);
  ASSERT_GE(fd, 0);

  // Prepares 1-4 are the first submissions; the first completion comes back short and the
  // hand-over of its rest (prepare 5) is refused.
  q->set_fault_injection(FaultInjection{1, FaultKind::kShort, kRequests + 1});
  std::vector<char> got(kRequests * kBytes, 0);
  for (size_t i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(
        q->submit(IoRequest{fd, IoOp::kRead, got.data() + i * kBytes, kBytes, i * kBytes, 100 + i})
            .ok());
  }
  ASSERT_TRUE(q->flush().ok());
  std::vector<IoCompletion> out;
  while (q->in_flight() > 0) ASSERT_TRUE(q->reap(out, true).ok());
  ASSERT_EQ(out.size(), kRequests);
  size_t failed = 0;
  for (const auto& c : out) {
    ASSERT_GE(c.tag, 100u);
    const size_t i = c.tag - 100;
    if (!c.status.ok()) {
      ++failed;
      EXPECT_NE(c.status.message().find("could not be resubmitted"), std::string::npos)
          << c.status.to_string();
      // The rest starts half-way: the message names its offset and length.
      EXPECT_NE(c.status.message().find("of 8192 bytes at offset " +
                                        std::to_string(i * kBytes + kBytes / 2)),
                std::string::npos)
          << c.status.to_string();
      continue;
    }
    EXPECT_EQ(std::memcmp(got.data() + i * kBytes, content.data() + i * kBytes, kBytes), 0)
        << "request " << i;
  }
  EXPECT_EQ(failed, 1u);
  // The queue is whole again: every slot takes a request, and they complete.
  q->set_fault_injection(FaultInjection{});
  for (size_t i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(
        q->submit(IoRequest{fd, IoOp::kRead, got.data() + i * kBytes, kBytes, i * kBytes, i}).ok());
  }
  ASSERT_TRUE(q->flush().ok());
  out.clear();
  while (q->in_flight() > 0) ASSERT_TRUE(q->reap(out, true).ok());
  ASSERT_EQ(out.size(), kRequests);
  for (const auto& c : out) EXPECT_TRUE(c.status.ok()) << c.status.to_string();
  EXPECT_EQ(got, content);
  close(fd);
}

INSTANTIATE_TEST_SUITE_P(Engines, IoQueueRefusal,
                         ::testing::Values(IoEngine::kUring, IoEngine::kThreadPool),
                         [](const auto& p) {
                           return p.param == IoEngine::kUring ? "Uring" : "ThreadPool";
                         });

}  // namespace
}  // namespace strata::nvme
