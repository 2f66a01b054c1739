// ScratchPool: reusable fp32 buffers for the collectives that widen 16-bit values (MpiComm sums
// bf16/fp16 through fp32), so that a collective does not allocate, zero and fault in fresh pages
// on every call. On the 2-vCPU test machine, 2 ranks (bench_comm --quick --dtype bf16, three
// alternating runs): all_reduce of 256 KiB 616-834 us before, 364-391 us after; of 1 MiB
// 2462-3286 us before, 1612-1838 after; reduce_scatter of 1 MiB 1324-1520 before, 1167-1190 after.
//
// A Buffer is taken for one collective and goes back to its pool when destroyed; its contents
// are uninitialised. The pool keeps at most kKeep free buffers (the largest).
//
// Thread safety: take() and a Buffer's destruction may run on any threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace strata::comm {

class ScratchPool : public std::enable_shared_from_this<ScratchPool> {
 public:
  static constexpr size_t kKeep = 4;

  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&&) noexcept = default;
    Buffer& operator=(Buffer&& other) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { release(); }

    float* data() const { return data_.get(); }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }

   private:
    friend class ScratchPool;
    void release();
    std::shared_ptr<ScratchPool> pool_;  // keeps the pool alive while the buffer is out
    std::unique_ptr<float[]> data_;
    size_t capacity_ = 0, size_ = 0;
  };

  static std::shared_ptr<ScratchPool> create() {
    return std::shared_ptr<ScratchPool>(new ScratchPool());
  }
  // A buffer of `n` floats (uninitialised): a free one large enough, the smallest such, or a new
  // one.
  Buffer take(size_t n);

 private:
  ScratchPool() = default;
  struct Free {
    std::unique_ptr<float[]> data;
    size_t capacity = 0;
  };
  void give(std::unique_ptr<float[]> data, size_t capacity);
  std::mutex mu_;
  std::vector<Free> free_;
};

}  // namespace strata::comm
