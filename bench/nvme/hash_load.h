// HashLoad: a thread that hashes as the swap store's checksummed writes do, for fio to run
// beside. The store hashes every byte it writes (xxh3, on its I/O thread, a queue's worth at a
// time as the requests go out); on a virtual disk whose host copies the data with the guest's
// CPUs, that work slows the disk itself, whoever does it. fio beside a HashLoad at the store's
// write rate pays the same toll, so the two can be compared like for like (docs/benchmarks.md).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/xxh3.h"

namespace strata::bench {

class HashLoad {
 public:
  // Hashes `burst_bytes` (a buffer of its own, in 1 MiB pieces) as fast as it can, then sleeps
  // until `burst_bytes / bytes_per_second` after the burst began; again until destroyed.
  HashLoad(uint64_t burst_bytes, double bytes_per_second)
      : buffer_(burst_bytes),
        period_(std::chrono::duration<double>(burst_bytes / bytes_per_second)) {
    for (size_t k = 0; k < buffer_.size(); ++k) buffer_[k] = static_cast<std::byte>(k * 131 + 7);
    thread_ = std::thread([this] { run(); });
  }
  HashLoad(const HashLoad&) = delete;
  HashLoad& operator=(const HashLoad&) = delete;
  ~HashLoad() {
    stop_.store(true);
    thread_.join();
  }

 private:
  void run() {
    constexpr size_t kPiece = size_t{1} << 20;
    uint64_t sink = 0;
    while (!stop_.load()) {
      const auto begin = std::chrono::steady_clock::now();
      for (size_t off = 0; off < buffer_.size(); off += kPiece) {
        sink += XXH3_64bits(buffer_.data() + off, std::min(kPiece, buffer_.size() - off));
      }
      std::this_thread::sleep_until(
          begin + std::chrono::duration_cast<std::chrono::steady_clock::duration>(period_));
    }
    sink_ = sink;
  }

  std::vector<std::byte> buffer_;
  std::chrono::duration<double> period_;
  std::atomic<bool> stop_{false};
  uint64_t sink_ = 0;  // keeps the hashing from being optimised away
  std::thread thread_;
};

}  // namespace strata::bench
