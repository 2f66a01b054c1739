#include "engine/partition_hold.h"

#include <algorithm>
#include <chrono>

namespace strata::engine {

PartitionHold::PartitionHold(size_t n) : state_(n, State::kHeld) {}

std::optional<size_t> PartitionHold::pick() {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i : wanted_) {
    if (state_[i] == State::kHeld) {
      state_[i] = State::kTaken;
      return i;
    }
  }
  while (next_ < state_.size() && state_[next_] != State::kHeld) ++next_;
  if (next_ == state_.size()) return std::nullopt;
  state_[next_] = State::kTaken;
  return next_++;
}

void PartitionHold::release(size_t i) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_[i] = State::kReleased;
    wanted_.erase(std::remove(wanted_.begin(), wanted_.end(), i), wanted_.end());
  }
  cv_.notify_all();
}

void PartitionHold::release_all() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::fill(state_.begin(), state_.end(), State::kReleased);
    wanted_.clear();
  }
  cv_.notify_all();
}

void PartitionHold::wait(size_t i) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (i >= state_.size() || state_[i] == State::kReleased) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (std::find(wanted_.begin(), wanted_.end(), i) == wanted_.end()) wanted_.push_back(i);
  cv_.wait(lock, [&] { return state_[i] == State::kReleased; });
  waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

size_t PartitionHold::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wanted_.size();
}

double PartitionHold::waited_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waited_s_;
}

}  // namespace strata::engine
