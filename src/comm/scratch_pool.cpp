#include "comm/scratch_pool.h"

#include <algorithm>
#include <utility>

namespace strata::comm {

ScratchPool::Buffer& ScratchPool::Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::move(other.pool_);
    data_ = std::move(other.data_);
    capacity_ = std::exchange(other.capacity_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void ScratchPool::Buffer::release() {
  if (pool_ != nullptr && data_ != nullptr) pool_->give(std::move(data_), capacity_);
  pool_.reset();
  data_.reset();
  capacity_ = size_ = 0;
}

ScratchPool::Buffer ScratchPool::take(size_t n) {
  Buffer b;
  if (n == 0) return b;
  b.pool_ = shared_from_this();
  b.size_ = n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->capacity >= n && (best == free_.end() || it->capacity < best->capacity)) best = it;
    }
    if (best != free_.end()) {
      b.data_ = std::move(best->data);
      b.capacity_ = best->capacity;
      free_.erase(best);
      return b;
    }
  }
  b.data_.reset(new float[n]);  // uninitialised: every use writes it before reading
  b.capacity_ = n;
  return b;
}

void ScratchPool::give(std::unique_ptr<float[]> data, size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(Free{std::move(data), capacity});
  if (free_.size() > kKeep) {  // drop the smallest
    auto smallest = std::min_element(free_.begin(), free_.end(), [](const Free& a, const Free& b) {
      return a.capacity < b.capacity;
    });
    free_.erase(smallest);
  }
}

}  // namespace strata::comm
