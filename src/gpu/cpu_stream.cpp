#include "gpu/cpu_stream.h"

#include <cstring>

#include "gpu/cpu_device_impl.h"

namespace strata::gpu {

// ---- CpuEvent ----

bool CpuEvent::query() {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= recorded_;
}

Status CpuEvent::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = recorded_;
  cv_.wait(lock, [&] { return completed_ >= target; });
  return error_;
}

uint64_t CpuEvent::next_generation() {
  std::lock_guard<std::mutex> lock(mu_);
  return ++recorded_;
}

uint64_t CpuEvent::recorded_generation() {
  std::lock_guard<std::mutex> lock(mu_);
  return recorded_;
}

void CpuEvent::complete(uint64_t generation, const Status& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation > completed_) {
      completed_ = generation;
      error_ = error;
    }
  }
  cv_.notify_all();
}

void CpuEvent::wait_for(uint64_t generation) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= generation; });
}

// ---- CpuStream ----

CpuStream::CpuStream(CpuDevice* device) : device_(device) {
  worker_ = std::thread([this] { run(); });
  device_->register_stream(this);
}

CpuStream::~CpuStream() {
  device_->unregister_stream(this);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  worker_.join();
}

void CpuStream::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    Work work = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    Status st = work();
    lock.lock();
    if (!st.ok() && error_.ok()) error_ = std::move(st);
    busy_ = false;
    if (queue_.empty()) cv_idle_.notify_all();
  }
}

float* CpuStream::scratch(int slot, size_t n) {
  std::vector<float>& v = scratch_[slot];
  if (v.size() < n) v.resize(n);
  return v.data();
}

void CpuStream::enqueue(Work work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  cv_work_.notify_one();
}

Status CpuStream::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
  Status st = std::move(error_);
  error_ = Status();
  return st;
}

Status CpuStream::copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return ok_status();
  if (dst == nullptr || src == nullptr) {
    return make_error(ErrorCode::kConfig, "stream copy of ", bytes, " bytes with a null pointer");
  }
  CpuDevice* dev = device_;
  enqueue([dst, src, bytes, kind, dev]() -> Status {
    std::memmove(dst, src, bytes);
    dev->throttle_link(kind, bytes);
    return ok_status();
  });
  return ok_status();
}

Status CpuStream::memset(void* dst, int value, size_t bytes) {
  if (bytes == 0) return ok_status();
  if (dst == nullptr) {
    return make_error(ErrorCode::kConfig, "stream memset of ", bytes, " bytes with a null pointer");
  }
  enqueue([dst, value, bytes]() -> Status {
    std::memset(dst, value, bytes);
    return ok_status();
  });
  return ok_status();
}

Status CpuStream::record(Event& event) {
  auto* ev = dynamic_cast<CpuEvent*>(&event);
  if (ev == nullptr)
    return make_error(ErrorCode::kConfig, "record() of an event of another device");
  const uint64_t gen = ev->next_generation();
  enqueue([this, ev, gen]() -> Status {
    Status err;
    {
      std::lock_guard<std::mutex> lock(mu_);
      err = error_;
    }
    ev->complete(gen, err);
    return ok_status();
  });
  return ok_status();
}

Status CpuStream::wait(Event& event) {
  auto* ev = dynamic_cast<CpuEvent*>(&event);
  if (ev == nullptr) return make_error(ErrorCode::kConfig, "wait() on an event of another device");
  const uint64_t gen = ev->recorded_generation();
  if (gen == 0) return ok_status();
  enqueue([ev, gen]() -> Status {
    ev->wait_for(gen);
    return ok_status();
  });
  return ok_status();
}

Status CpuStream::host_callback(std::function<void()> fn) {
  if (!fn) return make_error(ErrorCode::kConfig, "host_callback() with an empty function");
  host_callbacks_.fetch_add(1);
  enqueue([fn = std::move(fn)]() -> Status {
    fn();
    return ok_status();
  });
  return ok_status();
}

}  // namespace strata::gpu
