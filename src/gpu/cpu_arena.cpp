#include "gpu/cpu_arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace strata::gpu {
namespace {

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace

Result<std::unique_ptr<CpuArena>> CpuArena::create(size_t limit_bytes) {
  if (limit_bytes == 0) {
    return make_error(ErrorCode::kConfig, "device memory limit 0 is not accepted (need > 0 bytes)");
  }
  const size_t size = round_up(limit_bytes, kAlignment);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    return make_error(ErrorCode::kOutOfMemory, "cannot reserve ", size,
                      " bytes for the cpu device memory pool: ", std::strerror(err));
  }
  return std::unique_ptr<CpuArena>(new CpuArena(static_cast<char*>(p), size));
}

CpuArena::CpuArena(char* base, size_t limit_bytes) : base_(base), limit_bytes_(limit_bytes) {
  insert_free_locked(0, limit_bytes_);
}

CpuArena::~CpuArena() {
  STRATA_CHECK(allocated_.empty(),
               allocated_.size() << " device buffers outlive their CpuDevice (destroy them first)");
  munmap(base_, limit_bytes_);
}

void CpuArena::insert_free_locked(size_t offset, size_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void CpuArena::erase_free_locked(std::map<size_t, size_t>::iterator it) {
  auto range = free_by_size_.equal_range(it->second);
  for (auto s = range.first; s != range.second; ++s) {
    if (s->second == it->first) {
      free_by_size_.erase(s);
      break;
    }
  }
  free_by_offset_.erase(it);
}

Result<void*> CpuArena::allocate(size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  if (bytes > limit_bytes_) {
    std::lock_guard<std::mutex> lock(mu_);
    return make_error(ErrorCode::kOutOfMemory, "out of device memory (cpu): requested ", bytes,
                      " bytes, in use ", used_bytes_, " bytes, limit ", limit_bytes_, " bytes");
  }
  const size_t size = round_up(bytes, kAlignment);
  std::lock_guard<std::mutex> lock(mu_);
  auto best = free_by_size_.lower_bound(size);  // best fit: the smallest block that is enough
  if (best == free_by_size_.end()) {
    const size_t largest = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
    const bool fragmented = limit_bytes_ - used_bytes_ >= size;
    return make_error(ErrorCode::kOutOfMemory, "out of device memory (cpu): requested ", bytes,
                      " bytes, in use ", used_bytes_, " bytes, limit ", limit_bytes_, " bytes",
                      fragmented ? " (fragmented: largest free block " : "",
                      fragmented ? std::to_string(largest) : std::string(),
                      fragmented ? " bytes)" : "");
  }
  const size_t offset = best->second;
  const size_t block = best->first;
  erase_free_locked(free_by_offset_.find(offset));
  if (block > size) insert_free_locked(offset + size, block - size);
  allocated_.emplace(offset, size);
  used_bytes_ += size;
  if (used_bytes_ > peak_bytes_) peak_bytes_ = used_bytes_;
  return static_cast<void*>(base_ + offset);
}

void CpuArena::free(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const auto offset = static_cast<size_t>(static_cast<char*>(ptr) - base_);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocated_.find(offset);
  STRATA_CHECK(it != allocated_.end(), "freeing a pointer that is not a live device buffer");
  size_t size = it->second;
  STRATA_CHECK(size == round_up(bytes, kAlignment),
               "freeing " << bytes << " bytes of a block of " << size);
  allocated_.erase(it);
  used_bytes_ -= size;
  size_t start = offset;
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      erase_free_locked(prev);
    }
  }
  next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    erase_free_locked(next);
  }
  insert_free_locked(start, size);
}

size_t CpuArena::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_bytes_;
}

size_t CpuArena::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_bytes_;
}

size_t CpuArena::largest_free_block_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

size_t CpuArena::free_block_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_by_offset_.size();
}

}  // namespace strata::gpu
