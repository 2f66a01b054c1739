// bench_comm: algorithm and bus bandwidth of the seven collectives against message size, with
// nccl-tests' definitions. Launch under mpirun, e.g.
//   mpirun -np 2 build/bench/comm/bench_comm --quick
//   mpirun --oversubscribe -np 4 build/bench/comm/bench_comm            (add --allow-run-as-root as
//   root)
// Size S is the full buffer in bytes as in nccl-tests: the vector for all_reduce, reduce and
// broadcast; the n*c gathered/scattered buffer for all_gather, reduce_scatter, gather, scatter.
// Time t: per repeat, a barrier, then `iters` back-to-back calls; the slowest rank's time / iters;
// the median of --repeats repeats after one warm-up. algbw = S / t. busbw = algbw * factor:
// all_reduce 2(n-1)/n; reduce_scatter, all_gather, gather, scatter (n-1)/n; broadcast, reduce 1.
// Rank 0 prints a table and one final JSON line.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/placement.h"
#include "core/log.h"
#include "gpu/device.h"

namespace {

using namespace strata;
using comm::CollectiveKind;

constexpr CollectiveKind kKinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                     CollectiveKind::kAllGather, CollectiveKind::kBroadcast,
                                     CollectiveKind::kReduce,    CollectiveKind::kGather,
                                     CollectiveKind::kScatter};

double bus_factor(CollectiveKind k, int n) {
  switch (k) {
    case CollectiveKind::kAllReduce: return 2.0 * (n - 1) / n;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

bool full_is_n_c(CollectiveKind k) {
  return k == CollectiveKind::kReduceScatter || k == CollectiveKind::kAllGather ||
         k == CollectiveKind::kGather || k == CollectiveKind::kScatter;
}

struct Buffers {
  std::vector<std::byte> host_send, host_recv;
  gpu::DeviceBuffer dev_send, dev_recv;
  gpu::DeviceBuffer dev_scalar;         // one float, for the timing reduction on device buffers
  std::unique_ptr<gpu::Stream> stream;  // copies to and from dev_scalar
  void* send = nullptr;
  void* recv = nullptr;
};

// The largest `value` over the ranks, through device memory when the communicator takes it.
Result<float> max_over_ranks(comm::Communicator& c, Buffers& b, float value) {
  float out = 0.0f;
  if (!c.device_buffers()) {
    STRATA_RETURN_IF_ERROR(c.all_reduce(&value, &out, 1, DType::kF32, comm::ReduceOp::kMax));
    return out;
  }
  void* d = b.dev_scalar.data();
  STRATA_RETURN_IF_ERROR(b.stream->copy(d, &value, sizeof(float), gpu::CopyKind::kHostToDevice));
  STRATA_RETURN_IF_ERROR(b.stream->synchronize());
  STRATA_RETURN_IF_ERROR(c.all_reduce(d, d, 1, DType::kF32, comm::ReduceOp::kMax));
  STRATA_RETURN_IF_ERROR(b.stream->copy(&out, d, sizeof(float), gpu::CopyKind::kDeviceToHost));
  STRATA_RETURN_IF_ERROR(b.stream->synchronize());
  return out;
}

Status run_once(comm::Communicator& c, CollectiveKind k, Buffers& b, size_t count, DType t) {
  comm::CollectiveCall call{k, b.send, b.recv, count, t, comm::ReduceOp::kSum, 0};
  if (k == CollectiveKind::kBroadcast) call.send = call.recv;
  return c.start(call).wait();
}

// Seconds per call: the slowest rank's time over `iters` calls.
Result<double> time_calls(comm::Communicator& c, CollectiveKind k, Buffers& b, size_t count,
                          DType t, int iters) {
  STRATA_RETURN_IF_ERROR(c.barrier());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) STRATA_RETURN_IF_ERROR(run_once(c, k, b, count, t));
  const float secs = std::chrono::duration<float>(std::chrono::steady_clock::now() - t0).count();
  STRATA_ASSIGN_OR_RETURN(const float slowest, max_over_ranks(c, b, secs));
  return static_cast<double>(slowest) / iters;
}

int run(int argc, char** argv) {
  CLI::App app{"bench_comm: collective bandwidth (run under mpirun)"};
  bool quick = false;
  std::string backend_name = "auto";
  std::string dtype_name_arg = "f32";
  size_t min_bytes = 4096;
  size_t max_bytes = size_t{64} << 20;
  int repeats = 5;
  bool bind = true;
  app.add_flag("--quick", quick, "small sizes and few repeats (under 30 s)");
  app.add_option("--backend", backend_name, "auto, local, mpi or nccl");
  app.add_option("--dtype", dtype_name_arg, "f32, f16 or bf16");
  app.add_option("--min-bytes", min_bytes, "smallest message (bytes)");
  app.add_option("--max-bytes", max_bytes, "largest message (bytes)");
  app.add_option("--repeats", repeats, "timed repeats per point (>= 5; the median is reported)");
  app.add_option("--bind", bind, "bind each rank to its cores (true/false)");
  CLI11_PARSE(app, argc, argv);
  if (quick) max_bytes = std::min(max_bytes, size_t{1} << 20);

  auto backend = comm::parse_backend(backend_name);
  if (!backend.ok()) {
    std::fprintf(stderr, "bench_comm: --backend: %s\n", backend.status().message().c_str());
    return 2;
  }
  auto dtype = parse_dtype(dtype_name_arg);
  if (!dtype.ok()) {
    std::fprintf(stderr, "bench_comm: --dtype: %s\n", dtype.status().message().c_str());
    return 2;
  }
  if (repeats < 5) {
    std::fprintf(stderr, "bench_comm: --repeats %d is not accepted (use >= 5)\n", repeats);
    return 2;
  }
  if (min_bytes < 64 || max_bytes < min_bytes) {
    std::fprintf(stderr,
                 "bench_comm: --min-bytes %zu / --max-bytes %zu are not accepted (need 64 <= "
                 "min <= max)\n",
                 min_bytes, max_bytes);
    return 2;
  }
  auto created = comm::create_communicator(*backend);
  if (!created.ok()) {
    std::fprintf(stderr, "bench_comm: %s\n", created.status().to_string().c_str());
    return 1;
  }
  comm::Communicator& c = **created;
  const int n = c.size();
  const DType t = *dtype;
  const size_t e = dtype_size(t);
  const bool root = c.rank() == 0;
  if (auto placed = comm::place_rank(c, bind); !placed.ok()) {
    std::fprintf(stderr, "bench_comm: placement: %s\n", placed.status().to_string().c_str());
  }

  // Buffers of max_bytes (+ one shard's rounding) for every collective.
  const size_t buf_bytes = max_bytes + static_cast<size_t>(n) * e;
  std::unique_ptr<gpu::Device> device;  // declared first: destroyed after the buffers
  Buffers b;
  if (c.device_buffers()) {
    gpu::DeviceOptions o;
    o.ordinal = c.local_rank() % std::max(1, gpu::cuda_device_count());
    o.memory_limit_bytes = 2 * buf_bytes + (size_t{64} << 20);
    auto dev = gpu::create_device(gpu::DeviceKind::kCuda, o);
    if (!dev.ok()) {
      std::fprintf(stderr, "bench_comm: %s\n", dev.status().to_string().c_str());
      return 1;
    }
    device = std::move(dev).value();
    auto s = device->allocate(buf_bytes);
    auto r = device->allocate(buf_bytes);
    auto scalar = device->allocate(sizeof(float));
    auto stream = device->create_stream();
    if (!s.ok() || !r.ok() || !scalar.ok() || !stream.ok()) {
      std::fprintf(stderr, "bench_comm: device allocation of %zu bytes failed\n", buf_bytes);
      return 1;
    }
    b.dev_send = std::move(s).value();
    b.dev_recv = std::move(r).value();
    b.dev_scalar = std::move(scalar).value();
    b.stream = std::move(stream).value();
    b.send = b.dev_send.data();
    b.recv = b.dev_recv.data();
  } else {
    b.host_send.assign(buf_bytes, std::byte{0});
    b.host_recv.assign(buf_bytes, std::byte{0});
    b.send = b.host_send.data();
    b.recv = b.host_recv.data();
  }

  std::vector<size_t> sizes;
  for (size_t s = min_bytes; s <= max_bytes; s *= 4) sizes.push_back(s);
  if (sizes.back() != max_bytes) sizes.push_back(max_bytes);

  if (root) {
    std::printf("bench_comm: backend %s, %d ranks, dtype %s, %zu..%zu bytes, median of %d\n",
                std::string(c.backend()).c_str(), n, std::string(dtype_name(t)).c_str(), min_bytes,
                max_bytes, repeats);
    std::printf("%-15s %12s %12s %12s %12s %12s\n", "collective", "size_bytes", "count", "time_us",
                "algbw_GB/s", "busbw_GB/s");
  }
  nlohmann::json busbw, algbw, time_us;
  for (CollectiveKind k : kKinds) {
    const std::string name(comm::collective_name(k));
    for (size_t s_bytes : sizes) {
      const size_t count = full_is_n_c(k) ? s_bytes / (e * n) : s_bytes / e;
      if (count == 0) continue;
      const double bytes = static_cast<double>(full_is_n_c(k) ? count * n * e : count * e);
      // Enough calls per repeat to make small messages measurable.
      const int iters = static_cast<int>(std::clamp<size_t>((size_t{1} << 22) / s_bytes, 1, 50));
      auto warm = time_calls(c, k, b, count, t, 1);
      if (!warm.ok()) {
        std::fprintf(stderr, "bench_comm: %s: %s\n", name.c_str(),
                     warm.status().to_string().c_str());
        return 1;
      }
      std::vector<double> times;
      for (int r = 0; r < repeats; ++r) {
        auto tm = time_calls(c, k, b, count, t, iters);
        if (!tm.ok()) {
          std::fprintf(stderr, "bench_comm: %s: %s\n", name.c_str(),
                       tm.status().to_string().c_str());
          return 1;
        }
        times.push_back(*tm);
      }
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      const double alg = bytes / med / 1e9;
      const double bus = alg * bus_factor(k, n);
      if (root) {
        std::printf("%-15s %12.0f %12zu %12.1f %12.3f %12.3f\n", name.c_str(), bytes, count,
                    med * 1e6, alg, bus);
      }
      busbw[name] = bus;  // the last (largest) size wins
      algbw[name] = alg;
      time_us[name] = med * 1e6;
    }
  }
  if (root) {
    nlohmann::json j;
    j["bench"] = "comm";
    j["ranks"] = n;
    j["backend"] = std::string(c.backend());
    j["dtype"] = std::string(dtype_name(t));
    j["quick"] = quick;
    j["max_bytes"] = max_bytes;
    j["repeats"] = repeats;
    j["busbw_gbps"] = busbw;
    j["algbw_gbps"] = algbw;
    j["time_us"] = time_us;
    std::cout << j.dump() << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
