// bench_transfer: host-to-device and device-to-host copies of one buffer size, from pinned host
// memory (cpu::PinnedPool, registered with the CUDA driver once a CudaDevice exists:
// cpu/pinned_registry.h) against pageable memory (a std::vector), on the device the flags name.
// For each: GB/s (the copy enqueued and the stream synchronized) and the time the enqueue call
// itself took: on a GPU a copy from or to pageable memory is staged by the driver and a
// device-to-host one returns only when done, so it blocks the thread that enqueues it and
// nothing overlaps; from pinned memory the call returns at once. On the CpuDevice both kinds of
// memory are the same, and the figures show only that the bench runs.
// Warm-up first; medians of the repeats; the order of pinned and pageable alternates.
//   build/bench/transfer/bench_transfer [--device auto|cpu|cuda] [--mib N] [--repeats N] [--quick]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cpu/pinned_memory.h"
#include "cpu/pinned_registry.h"
#include "gpu/device.h"

namespace {

using namespace strata;
using bench::Clock;
STRATA_BENCH_CHECKS("bench_transfer")

struct Figures {
  std::vector<double> gbs, enqueue_ms;
};

// One copy: its rate over enqueue + synchronize, and how long the enqueue call blocked.
void measure(gpu::Stream& s, void* dst, const void* src, size_t bytes, gpu::CopyKind kind,
             Figures& f) {
  const auto t0 = Clock::now();
  check(s.copy(dst, src, bytes, kind));
  const double enqueue_s = bench::seconds_since(t0);
  check(s.synchronize());
  const double total_s = bench::seconds_since(t0);
  f.gbs.push_back(double(bytes) / total_s / 1e9);
  f.enqueue_ms.push_back(enqueue_s * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_transfer: host<->device copies, pinned against pageable host memory"};
  std::string device_name = "auto";
  int64_t mib = 256;
  int repeats = 7;
  bool quick = false;
  app.add_option("--device", device_name, "auto|cpu|cuda")->capture_default_str();
  app.add_option("--mib", mib, "MiB per copy")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--repeats", repeats, "measured copies of each kind")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_flag("--quick", quick, "64 MiB, 3 repeats");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    mib = std::min<int64_t>(mib, 64);
    repeats = std::min(repeats, 3);
  }
  const auto kind = gpu::parse_device_kind(device_name);
  if (!kind.ok()) {
    std::fprintf(stderr, "bench_transfer: --device %s: %s\n", device_name.c_str(),
                 kind.status().to_string().c_str());
    return 1;
  }
  gpu::DeviceOptions o;
  const size_t bytes = static_cast<size_t>(mib) << 20;
  o.memory_limit_bytes = kind.value() == gpu::DeviceKind::kCpu ? bytes + (64 << 20) : 0;
  auto dev = check(gpu::create_device(kind.value(), o));  // a CUDA device registers pinned memory
  auto stream = check(dev->create_stream());
  gpu::DeviceBuffer on_device = check(dev->allocate(bytes));
  cpu::PinnedBuffer pinned = check(cpu::default_pinned_pool().allocate(bytes));
  std::vector<std::byte> pageable(bytes);
  std::memset(pinned.data(), 1, bytes);
  std::memset(pageable.data(), 2, bytes);

  // [direction][memory]: h2d/d2h x pinned/pageable.
  Figures fig[2][2];
  void* host[2] = {pinned.data(), pageable.data()};
  Figures warm;
  for (int d = 0; d < 2; ++d) {
    for (int m = 0; m < 2; ++m) {
      const bool h2d = d == 0;
      measure(*stream, h2d ? on_device.data() : host[m], h2d ? host[m] : on_device.data(), bytes,
              h2d ? gpu::CopyKind::kHostToDevice : gpu::CopyKind::kDeviceToHost, warm);
    }
  }
  for (int r = 0; r < repeats; ++r) {
    for (int d = 0; d < 2; ++d) {
      for (int i = 0; i < 2; ++i) {
        const int m = (r % 2 == 0) ? i : 1 - i;  // alternate which memory goes first
        const bool h2d = d == 0;
        measure(*stream, h2d ? on_device.data() : host[m], h2d ? host[m] : on_device.data(), bytes,
                h2d ? gpu::CopyKind::kHostToDevice : gpu::CopyKind::kDeviceToHost, fig[d][m]);
      }
    }
  }
  const char* dir_name[2] = {"h2d", "d2h"};
  const char* mem_name[2] = {"pinned", "pageable"};
  // Registered with the device's driver (a CUDA device registers every pinned buffer; the
  // CpuDevice none): without it "pinned" would be pageable for the device.
  const bool registered = cpu::attached_pinned_buffers() > 0;
  std::printf(
      "bench_transfer: %s, %lld MiB a copy, median of %d (pinned host memory %s, %s)\n",
      dev->name().c_str(), static_cast<long long>(mib), repeats,
      pinned.locked() ? "page-locked" : "not locked (the OS refused)",
      registered ? "registered with the device's driver" : "not registered with any driver");
  std::printf("%-6s %-9s %10s %12s\n", "copy", "host", "GB/s", "enqueue ms");
  nlohmann::json j;
  j["bench"] = "transfer";
  j["device"] = std::string(gpu::device_kind_name(dev->kind()));
  j["device_name"] = dev->name();
  j["mib"] = mib;
  j["repeats"] = repeats;
  j["pinned_registered"] = registered;
  for (int d = 0; d < 2; ++d) {
    for (int m = 0; m < 2; ++m) {
      const double gbs = bench::median(fig[d][m].gbs);
      const double enq = bench::median(fig[d][m].enqueue_ms);
      std::printf("%-6s %-9s %10.2f %12.3f\n", dir_name[d], mem_name[m], gbs, enq);
      const std::string key = std::string(dir_name[d]) + "_" + mem_name[m];
      j[key + "_gbs"] = gbs;
      j[key + "_enqueue_ms"] = enq;
    }
    j[std::string(dir_name[d]) + "_pinned_over_pageable"] =
        bench::median(fig[d][0].gbs) / std::max(bench::median(fig[d][1].gbs), 1e-12);
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
