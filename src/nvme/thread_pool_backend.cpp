// pread/pwrite thread-pool engine: the step-down when io_uring is unavailable.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "nvme/io_backend.h"

namespace strata::nvme::detail {
namespace {

class ThreadPoolBackend final : public IoBackend {
 public:
  explicit ThreadPoolBackend(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { run(); });
  }
  ~ThreadPoolBackend() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  ThreadPoolBackend(const ThreadPoolBackend&) = delete;
  ThreadPoolBackend& operator=(const ThreadPoolBackend&) = delete;

  Status prepare(const RawOp& op) override {
    staged_.push_back(op);
    return ok_status();
  }

  Status submit() override {
    if (staged_.empty()) return ok_status();
    {
      std::lock_guard lock(mu_);
      for (const auto& op : staged_) work_.push_back(op);
    }
    staged_.clear();
    work_cv_.notify_all();
    return ok_status();
  }

  Status wait(std::vector<RawCompletion>& out, bool wait_one) override {
    std::unique_lock lock(mu_);
    if (wait_one) done_cv_.wait(lock, [&] { return !done_.empty() || woken_; });
    woken_ = false;
    while (!done_.empty()) {
      out.push_back(done_.front());
      done_.pop_front();
    }
    return ok_status();
  }

  void wake() override {
    {
      std::lock_guard lock(mu_);
      woken_ = true;
    }
    done_cv_.notify_all();
  }

  Result<bool> register_buffers(std::span<const iovec>, std::string&) override { return false; }
  IoEngine engine() const override { return IoEngine::kThreadPool; }
  std::string describe() const override {
    return "pread/pwrite thread pool (" + std::to_string(workers_.size()) + " threads)";
  }

 private:
  void run() {
    for (;;) {
      RawOp op;
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
        if (work_.empty()) return;
        op = work_.front();
        work_.pop_front();
      }
      // One syscall per operation; short results and EINTR go back to IoQueue, which decides.
      const ssize_t n = op.write
                            ? pwrite(op.fd, op.buffer, op.size_bytes, static_cast<off_t>(op.offset))
                            : pread(op.fd, op.buffer, op.size_bytes, static_cast<off_t>(op.offset));
      const int64_t res = n < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(n);
      {
        std::lock_guard lock(mu_);
        done_.push_back(RawCompletion{op.slot, res});
      }
      done_cv_.notify_one();
    }
  }

  std::vector<RawOp> staged_;  // owner thread only
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<RawOp> work_;
  std::deque<RawCompletion> done_;
  bool stop_ = false;
  bool woken_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<IoBackend> make_thread_pool_backend(int threads) {
  return std::make_unique<ThreadPoolBackend>(threads);
}

}  // namespace strata::nvme::detail
