#include "planner/calibration.h"

#include <oneapi/tbb/task_arena.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "core/median.h"
#include "cpu/cpu_adam.h"
#include "cpu/pinned_memory.h"
#include "gpu/kernels.h"
#include "model/replace_file.h"
#include "planner/compute_probe.h"
#include "scheduler/executor.h"

namespace strata::planner {

namespace {

using json = nlohmann::json;
using sched::Work;

// The median of `reps` timed runs of fn after one warm-up, in seconds.
Result<double> median_time(const std::function<Status()>& fn, int reps = 3) {
  STRATA_RETURN_IF_ERROR(fn());
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    STRATA_RETURN_IF_ERROR(fn());
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return std::max(median(std::move(t)), 1e-9);
}

double process_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown cpu";
}

// Part of the cache key: raised when what the probes time changes inside strata itself, so that
// rates measured through the old paths are not reused (2: pinned buffers on huge pages, which
// made the swap store's transfers about 2.5x faster on the test machine; 3: the swap store's
// writes hashed on its I/O thread with the dispatched xxh3, and woken for new jobs; 4: the
// compute probe replays the model's ops as a step does, compute_probe.h; 5: and back to back,
// the difference a hand-off charged where a compute task first waits on a transfer).
constexpr int kProbeVersion = 5;

// Measurements an entry keeps (calibration.h).
constexpr size_t kKept = 5;

// `sharing`: the ranks on this machine, which probe at once as they run (more than one:
// each rate is what one of them gets while the others do the same work; a separate entry).
std::string machine_key(const gpu::Device& device, int sharing) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::ostringstream os;
  os << host << " | " << cpu_model() << " | " << std::thread::hardware_concurrency() << " cores | "
     << device.name() << " | probes " << kProbeVersion;
  if (sharing > 1) os << " | " << sharing << " ranks on this machine";
  return os.str();
}

Result<std::vector<double>> measure_link(gpu::Device& device) {
  const size_t bytes = size_t{32} << 20;
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer d, device.allocate(bytes));
  STRATA_ASSIGN_OR_RETURN(cpu::PinnedBuffer h, cpu::default_pinned_pool().allocate(bytes));
  std::memset(h.data(), 1, bytes);
  STRATA_ASSIGN_OR_RETURN(auto s, device.create_stream());
  std::vector<double> out;
  for (gpu::CopyKind kind : {gpu::CopyKind::kHostToDevice, gpu::CopyKind::kDeviceToHost}) {
    STRATA_ASSIGN_OR_RETURN(double t, median_time([&]() -> Status {
                              const bool up = kind == gpu::CopyKind::kHostToDevice;
                              STRATA_RETURN_IF_ERROR(s->copy(
                                  up ? d.data() : h.data(), up ? h.data() : d.data(), bytes, kind));
                              return s->synchronize();
                            }));
    out.push_back(double(bytes) / t);
  }
  return out;
}

// {host bytes/s (gradient check), CPU Adam elements/s, device Adam elements/s, device bytes/s
// (Kernels::accumulate, fp32 += bf16: 10 bytes read and written an element)}.
Result<std::vector<double>> measure_host(const CalibrationRequest& rq) {
  const int64_t n = int64_t{4} << 20;
  std::vector<float> state(static_cast<size_t>(3 * n), 0.01f);
  std::vector<uint16_t> grads(static_cast<size_t>(8 * n), 0x3c00);  // 64 MiB of 16-bit values
  std::vector<uint16_t> out(static_cast<size_t>(n));
  tbb::task_arena arena(std::max(1, rq.host_threads));
  double check_s = 0.0, adam_s = 0.0;
  Status st;
  arena.execute([&] {
    auto r = median_time([&] {
      volatile double sink = cpu::grad_check(grads.data(), DType::kBF16, 8 * n).sum_squares;
      (void)sink;
      return ok_status();
    });
    if (!r.ok()) st = r.status();
    check_s = r.ok() ? *r : 1.0;
    const cpu::CpuAdam adam{cpu::AdamHyper{}};
    cpu::AdamBuffers b;
    b.params = state.data();
    b.exp_avg = state.data() + n;
    b.exp_avg_sq = state.data() + 2 * n;
    b.grads = grads.data();
    b.grad_dtype = DType::kBF16;
    b.out16 = out.data();
    b.out_dtype = DType::kBF16;
    b.numel = n;
    auto a = median_time([&] { return adam.step(b, cpu::AdamStep{1, 1.0f}); });
    if (!a.ok()) st = a.status();
    adam_s = a.ok() ? *a : 1.0;
  });
  STRATA_RETURN_IF_ERROR(st);
  // The device's Adam kernel.
  gpu::Device& dev = *rq.device;
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer ds, dev.allocate(static_cast<size_t>(3 * n) * 4));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer dg, dev.allocate(static_cast<size_t>(n) * 2));
  STRATA_ASSIGN_OR_RETURN(auto s, dev.create_stream());
  // Set-up copies from pageable vectors: the synchronous copy (DESIGN.md §3).
  STRATA_RETURN_IF_ERROR(
      s->copy_now(ds.data(), state.data(), ds.size_bytes(), gpu::CopyKind::kHostToDevice));
  STRATA_RETURN_IF_ERROR(
      s->copy_now(dg.data(), grads.data(), dg.size_bytes(), gpu::CopyKind::kHostToDevice));
  STRATA_ASSIGN_OR_RETURN(cpu::AdamConstants k,
                          cpu::CpuAdam(cpu::AdamHyper{}).constants({1, 1.0f}));
  gpu::AdamArgs args;
  args.params = ds.as<float>();
  args.exp_avg = ds.as<float>() + n;
  args.exp_avg_sq = ds.as<float>() + 2 * n;
  args.grads = dg.data();
  args.grad_dtype = DType::kBF16;
  args.numel = n;
  args.constants = k;
  STRATA_ASSIGN_OR_RETURN(double dev_s, median_time([&]() -> Status {
                            STRATA_RETURN_IF_ERROR(dev.kernels().adam_step(*s, args));
                            return s->synchronize();
                          }));
  // Four passes a timing, so that a GPU's (about 40 MiB each) are not a launch's latency.
  constexpr int kPasses = 4;
  STRATA_ASSIGN_OR_RETURN(double pass_s, median_time([&]() -> Status {
                            for (int i = 0; i < kPasses; ++i) {
                              STRATA_RETURN_IF_ERROR(dev.kernels().accumulate(
                                  *s, ds.data(), DType::kF32, dg.data(), DType::kBF16, n));
                            }
                            return s->synchronize();
                          }));
  return std::vector<double>{double(8 * n * 2) / check_s, double(n) / adam_s, double(n) / dev_s,
                             double(kPasses * n * 10) / pass_s};
}

// {read bytes/s, write bytes/s, requests/s, CPU s a request, CPU s a byte, drains (1 or 0)}:
// 4 objects of 32 MiB at once, as the nvme lane's workers; then single small requests, one after
// the other (each pays the disk's latency); then a small read beside a large one.
Result<std::vector<double>> measure_disk(const CalibrationRequest& rq) {
  const size_t each = size_t{32} << 20;
  const int objects = 4;
  const int big_runs = 5, pairs = 9;  // timed, each after one warm-up (median_time)
  nvme::SwapStoreOptions so;
  so.dirs = rq.nvme_dirs;
  so.capacity_bytes = (each * objects + (size_t{2} << 20) * rq.nvme_dirs.size()) + (16 << 20);
  so.block_bytes = rq.nvme_block_bytes;
  so.extent_bytes = std::max<uint64_t>(so.extent_bytes, rq.nvme_block_bytes);
  so.queue.queue_depth = rq.nvme_queue_depth;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<nvme::SwapStore> opened, nvme::SwapStore::open(so));
  nvme::SwapStore& store = *opened;
  STRATA_ASSIGN_OR_RETURN(cpu::PinnedBuffer buf,
                          cpu::default_pinned_pool().allocate(each * objects));
  std::memset(buf.data(), 7, buf.size_bytes());
  const uint64_t key0 = uint64_t{1} << 62;
  auto run = [&](bool write) -> Status {
    std::vector<nvme::IoHandle> io;
    for (int i = 0; i < objects; ++i) {
      std::byte* at = buf.bytes() + size_t(i) * each;
      io.push_back(write ? store.write(key0 + uint64_t(i), at, each)
                         : store.read(key0 + uint64_t(i), at, each));
    }
    Status first;
    for (auto& h : io) {
      Status st = h.wait();
      if (first.ok() && !st.ok()) first = st;
    }
    return first;
  };
  // The process's CPU while the store works (its threads', the kernel's for them): the rank's
  // other threads are idle meanwhile.
  const double cpu0 = process_cpu_s();
  STRATA_ASSIGN_OR_RETURN(double w, median_time([&] { return run(true); }, big_runs));
  STRATA_ASSIGN_OR_RETURN(double r, median_time([&] { return run(false); }, big_runs));
  const double cpu_big = process_cpu_s() - cpu0;
  const double total = double(each) * objects;
  // A request's latency: one 4 KiB write, then its read, alone (the median of the pairs).
  auto one = [&]() -> Status {
    STRATA_RETURN_IF_ERROR(store.write(key0, buf.data(), 4096).wait());
    return store.read(key0, buf.data(), 4096).wait();
  };
  const double cpu1 = process_cpu_s();
  STRATA_ASSIGN_OR_RETURN(double pair, median_time(one, pairs));
  // Its CPU: per request from the small ones, per byte from the rest of the large ones' (both
  // counts with the warm-ups).
  const double small_requests = 2.0 * (pairs + 1), big_passes = 2.0 * (big_runs + 1);
  const double cpu_op = (process_cpu_s() - cpu1) / small_requests;
  const double cpu_byte =
      std::max(0.0, cpu_big - big_passes * objects * cpu_op) / (big_passes * total);
  // Whether the disk drains (sched::Rates::disk_drains): a 64 KiB read issued together with a
  // 2 MiB one, nine times: it completes with the large one (at 0.7x its time or later) on a
  // disk that reports what it holds done together, long before it elsewhere. (With several
  // directories the two may land on different disks: a draining pair then reads as not.)
  const uint64_t small_key = key0 + 1, large_key = key0 + 2;
  const size_t small = size_t{64} << 10, large = size_t{2} << 20;
  STRATA_RETURN_IF_ERROR(store.write(small_key, buf.data(), small).wait());
  STRATA_RETURN_IF_ERROR(store.write(large_key, buf.bytes() + each, large).wait());
  std::vector<double> ratio;
  for (int i = 0; i < 9; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    nvme::IoHandle a = store.read(small_key, buf.data(), small);
    nvme::IoHandle b = store.read(large_key, buf.bytes() + each, large);
    STRATA_RETURN_IF_ERROR(a.wait());
    const auto ts = std::chrono::steady_clock::now();
    STRATA_RETURN_IF_ERROR(b.wait());
    const auto tl = std::chrono::steady_clock::now();
    ratio.push_back(std::chrono::duration<double>(ts - t0).count() /
                    std::max(std::chrono::duration<double>(tl - t0).count(), 1e-9));
  }
  const double drains = median(std::move(ratio)) >= 0.7 ? 1.0 : 0.0;
  return std::vector<double>{total / r, total / w, 2.0 / pair, cpu_op, cpu_byte, drains};
}

// A collective's time is a latency per call and its bytes over a rate: both from the medians of
// a small call (2048 16-bit elements per rank) and a larger one (256Ki, 512 KiB), for the calls
// that move data (all-gathers) and those that sum as they go (reduce-scatters: on the test
// machine a 32 KiB reduce-scatter took 36 us where an all-gather of as many bytes took 7; from
// 8 MiB on, its rate halves again as its 32-bit sums leave the caches).
// {bytes/s moved, bytes/s reduced, calls/s moving, calls/s reducing}.
// A communicator of device buffers (comm.device_buffers()) is measured on buffers of `device`
// (what they hold does not matter to the time).
Result<std::vector<double>> measure_network(comm::Communicator& comm, gpu::Device& device) {
  const size_t n = static_cast<size_t>(comm.size());
  constexpr size_t kLargest = size_t{256} << 10;  // elements per rank
  std::vector<uint16_t> in, out;
  gpu::DeviceBuffer din, dout;
  if (comm.device_buffers()) {
    STRATA_ASSIGN_OR_RETURN(din, device.allocate(n * kLargest * 2));
    STRATA_ASSIGN_OR_RETURN(dout, device.allocate(n * kLargest * 2));
  }
  auto time = [&](comm::CollectiveKind kind, size_t count, double& sent) -> Result<double> {
    const bool gather = kind == comm::CollectiveKind::kAllGather;
    in.assign(din.data() != nullptr ? 0 : gather ? count : n * count, 1);
    out.assign(dout.data() != nullptr ? 0 : gather ? n * count : count, 0);
    comm::CollectiveCall call;
    call.kind = kind;
    call.send = din.data() != nullptr ? din.data() : in.data();
    call.recv = dout.data() != nullptr ? dout.data() : out.data();
    call.count = count;
    call.dtype = DType::kBF16;
    sent = double(comm::textbook_bytes(call, comm.rank(), comm.size()).sent);
    return median_time([&] { return comm.start(call).wait(); }, count < 4096 ? 9 : 5);
  };
  std::vector<double> rates(4);
  const comm::CollectiveKind kinds[2] = {comm::CollectiveKind::kAllGather,
                                         comm::CollectiveKind::kReduceScatter};
  for (int k = 0; k < 2; ++k) {
    double small_sent = 0.0, large_sent = 0.0;
    STRATA_ASSIGN_OR_RETURN(const double small, time(kinds[k], 2048, small_sent));
    STRATA_ASSIGN_OR_RETURN(const double large, time(kinds[k], kLargest, large_sent));
    // At least a quarter of the larger call is its bytes': one that took no longer than the
    // small one (a hiccup of this machine's during the small one, seen under load) would
    // otherwise read as a network of infinite bandwidth.
    const double per_byte = std::max(large - small, 0.25 * large) / (large_sent - small_sent);
    rates[size_t(k)] = 1.0 / per_byte;
    rates[size_t(k) + 2] = 1.0 / std::max(small - small_sent * per_byte, 1e-7);
  }
  return rates;
}

// Seconds per task: a chain of 64 empty tasks alternating between the compute and cpu lanes.
Result<double> measure_overhead(gpu::Device& device, int host_threads) {
  sched::Plan plan;
  sched::TaskId prev = -1;
  for (int i = 0; i < 64; ++i) {
    const sched::Lane lane = i % 2 == 0 ? sched::Lane::kCompute : sched::Lane::kCpu;
    std::vector<sched::TaskId> deps;
    if (prev >= 0) deps.push_back(prev);
    prev = plan.add(
        "empty", lane, [](const sched::TaskContext&) { return ok_status(); }, deps);
  }
  STRATA_RETURN_IF_ERROR(plan.finalize());
  sched::ExecutorOptions eo;
  eo.cpu_threads = std::max(1, host_threads);
  eo.cpu_workers = std::min(2, eo.cpu_threads);
  eo.trace = false;
  STRATA_ASSIGN_OR_RETURN(auto ex, sched::Executor::create(device, std::move(plan), eo));
  STRATA_ASSIGN_OR_RETURN(double t, median_time([&] { return ex->replay(); }));
  return t / 64.0;
}

// The disk under a directory, for the cache: its filesystem (type, id, device number), so that
// every directory of one filesystem (a fresh temporary one each run) shares the entry; the
// path itself when it cannot be stat'ed (the store then fails to open and says why).
std::string filesystem_of(const std::string& dir) {
  struct stat st {};
  struct statfs fs {};
  if (::stat(dir.c_str(), &st) != 0 || ::statfs(dir.c_str(), &fs) != 0) return dir;
  int id[2];
  std::memcpy(id, &fs.f_fsid, sizeof(id));
  char text[96];
  std::snprintf(text, sizeof(text), "fs %lx:%08x%08x:%u:%u", static_cast<unsigned long>(fs.f_type),
                static_cast<unsigned>(id[0]), static_cast<unsigned>(id[1]), major(st.st_dev),
                minor(st.st_dev));
  return text;
}

// An entry's rows (measurements, oldest first): an array of arrays of numbers; one row when it is
// an array of numbers; none when it is neither.
std::vector<std::vector<double>> history_rows(const json& e) {
  std::vector<std::vector<double>> out;
  if (!e.is_array() || e.empty()) return out;
  if (e[0].is_number()) {
    if (std::all_of(e.begin(), e.end(), [](const json& x) { return x.is_number(); })) {
      out.push_back(e.get<std::vector<double>>());
    }
    return out;
  }
  for (const json& row : e) {
    if (row.is_array() && !row.empty() &&
        std::all_of(row.begin(), row.end(), [](const json& x) { return x.is_number(); })) {
      out.push_back(row.get<std::vector<double>>());
    }
  }
  return out;
}

// The median of each value over the rows of the last row's length (the mean of the middle two
// for an even count); empty when there are no rows.
std::vector<double> median_row(const std::vector<std::vector<double>>& rows) {
  if (rows.empty()) return {};
  std::vector<double> out(rows.back().size());
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<double> v;
    for (const auto& r : rows) {
      if (r.size() == out.size()) v.push_back(r[i]);
    }
    out[i] = median(std::move(v));
  }
  return out;
}

json read_cache(const std::string& path) {
  std::ifstream in(path);
  if (!in) return json::object();
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

Status write_cache(const std::string& path, const json& j) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string text = j.dump(1) + "\n";
  const std::string what = "calibration cache " + path;
  return model::write_replacing(path, what, /*sync=*/false, [&](int fd) {
    return model::write_all(fd, text.data(), text.size(), what);
  });
}

}  // namespace

std::string default_calibration_path() {
  if (const char* d = std::getenv("STRATA_CACHE_DIR"); d != nullptr && *d != '\0') {
    return std::string(d) + "/calibration.json";
  }
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d != '\0') {
    return std::string(d) + "/strata/calibration.json";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/strata/calibration.json";
}

std::string Calibration::describe() const {
  std::ostringstream os;
  os.precision(3);
  for (int k = 0; k < sched::kNumWorkKinds; ++k) {
    const double r = rates.per_second[k];
    if (r <= 0.0) continue;
    os << "  " << sched::work_name(static_cast<Work>(k)) << ": " << r << " per s\n";
  }
  os << "  task overhead: " << rates.task_overhead_s * 1e6 << " us; hand-off "
     << rates.handoff_s * 1e6 << " us"
     << (rates.shared_cores ? "; every lane but nvme shares the cores" : "") << "\n";
  if (rates.nvme_cpu_op_s > 0.0 || rates.nvme_cpu_byte_s > 0.0) {
    os << "  nvme request CPU: " << rates.nvme_cpu_op_s * 1e6 << " us each + "
       << rates.nvme_cpu_byte_s * 1e12 << " us per MB"
       << (rates.disk_drains ? "; the disk reports its requests done together" : "") << "\n";
  }
  return os.str();
}

Result<Calibration> calibrate(const CalibrationRequest& rq) {
  if (rq.device == nullptr) return make_error(ErrorCode::kConfig, "calibrate: no device");
  Calibration cal;
  cal.cache_path = rq.cache_path.empty() ? default_calibration_path() : rq.cache_path;
  json cache = read_cache(cal.cache_path);
  const int ranks = rq.comm != nullptr ? rq.comm->size() : 1;
  const int sharing = rq.comm != nullptr ? std::max(1, rq.comm->local_size()) : 1;
  json& mine = cache[machine_key(*rq.device, sharing)];
  if (!mine.is_object()) mine = json::object();
  sched::Rates& r = cal.rates;
  // The network first: a collective, which every rank must reach (before any other measurement
  // can fail on one rank).
  const std::array<Work, 4> kNetKinds = {Work::kNetBytes, Work::kNetReduceBytes, Work::kNetCalls,
                                         Work::kNetReduceCalls};
  const std::array<Work, 4> kLinkKinds = {Work::kLinkBytes, Work::kLinkReduceBytes,
                                          Work::kLinkCalls, Work::kLinkReduceCalls};
  if (ranks > 1) {
    // Measured every time, not cached: a collective, which every rank must start whatever its
    // own cache holds. The device links: with the device communicator where there is one, else
    // the host one's (which the CpuDevice's device collectives use).
    STRATA_ASSIGN_OR_RETURN(const std::vector<double> net, measure_network(*rq.comm, *rq.device));
    std::vector<double> link = net;
    if (rq.device_comm != nullptr && rq.device_comm != rq.comm) {
      STRATA_ASSIGN_OR_RETURN(link, measure_network(*rq.device_comm, *rq.device));
    }
    for (size_t i = 0; i < kNetKinds.size(); ++i) {
      r.per_second[int(kNetKinds[i])] = net[i];
      r.per_second[int(kLinkKinds[i])] = link[i];
    }
  } else {
    for (const Work w : kNetKinds) r.per_second[int(w)] = 1e30;  // one rank sends nothing
    for (const Work w : kLinkKinds) r.per_second[int(w)] = 1e30;
  }
  if (!rq.probe.make) return make_error(ErrorCode::kConfig, "calibration: no model probe");
  // The entries, in one order on every rank.
  enum Slot { kCompute, kLink, kHost, kOverhead, kDisk, kSlots };
  std::string keys[kSlots];
  std::ostringstream ck;
  ck << "compute " << rq.probe.key << " B=" << rq.shape.batch << " T=" << rq.shape.seq;
  keys[kCompute] = ck.str();
  keys[kLink] = "link";
  const std::string threads = " threads=" + std::to_string(rq.host_threads);
  keys[kHost] = "host" + threads;
  keys[kOverhead] = "overhead" + threads;
  if (!rq.nvme_dirs.empty()) {
    keys[kDisk] = "disk+requests+cpu block=" + std::to_string(rq.nvme_block_bytes) +
                  " depth=" + std::to_string(rq.nvme_queue_depth);
    for (const std::string& d : rq.nvme_dirs) keys[kDisk] += " " + filesystem_of(d);
  }
  // Disk entries of earlier forms, never matched again: keyed by the directories' paths (one per
  // temporary directory), or without the requests' CPU.
  for (auto it = mine.begin(); it != mine.end();) {
    it = it.key().rfind("disk+requests ", 0) == 0 ? mine.erase(it) : std::next(it);
  }
  // What each entry holds, in order: a rate per kind of work, or one of the other values
  // (seconds a task; the compute probe's extra per op shaped as a step, and its op time; an NVMe
  // request's CPU, and whether the disk drains, 1 or 0).
  enum Other {
    kOverheadSlot,
    kStepExtraSlot,
    kOpTimeSlot,
    kNvmeCpuOpSlot,
    kNvmeCpuByteSlot,
    kDiskDrainsSlot,
    kOthers
  };
  double other[kOthers] = {};
  auto held = [](Other o) { return -1 - int(o); };  // an Other, as a kHolds entry
  const std::vector<int> kHolds[kSlots] = {
      {int(Work::kFlops), int(Work::kFlopsHead), held(kStepExtraSlot), held(kOpTimeSlot)},
      {int(Work::kH2DBytes), int(Work::kD2HBytes)},
      {int(Work::kHostBytes), int(Work::kAdamElements), int(Work::kDeviceAdamElements),
       int(Work::kDeviceBytes)},
      {held(kOverheadSlot)},
      {int(Work::kNvmeReadBytes), int(Work::kNvmeWriteBytes), int(Work::kNvmeOps),
       held(kNvmeCpuOpSlot), held(kNvmeCpuByteSlot), held(kDiskDrainsSlot)}};
  // An entry's rows that hold what it holds now (a row of another form, from another version of
  // strata, is left out: an entry without any is measured again).
  auto rows_of = [&](int k) {
    std::vector<std::vector<double>> v = history_rows(mine.value(keys[k], json()));
    std::erase_if(v,
                  [&](const std::vector<double>& row) { return row.size() != kHolds[k].size(); });
    return v;
  };
  // An entry is measured when any rank lacks it (or --calibrate), by every rank at once after a
  // barrier: the ranks of a machine share its cores, memory and disks, and run their steps at
  // the same time, so each measures what it gets beside the others (two ranks on this test
  // machine's two vCPUs compute at 0.55x the rate of one alone).
  float need[kSlots] = {};
  for (int k = 0; k < kSlots; ++k) {
    const bool has = !keys[k].empty() && !rows_of(k).empty();
    need[k] = !keys[k].empty() && (rq.redo || !has) ? 1.0f : 0.0f;
  }
  if (ranks > 1) {
    STRATA_RETURN_IF_ERROR(
        rq.comm->all_reduce(need, need, kSlots, DType::kF32, comm::ReduceOp::kMax));
  }
  // Each entry keeps its last kKept measurements (rows, oldest first); its value is their
  // median, value by value.
  std::vector<std::vector<double>> rows[kSlots];
  auto entry = [&](Slot k, const std::function<Result<std::vector<double>>()>& measure)
      -> Result<std::vector<double>> {
    if (need[k] != 0.0f && ranks > 1) STRATA_RETURN_IF_ERROR(rq.comm->barrier());
    if (keys[k].empty()) return std::vector<double>{};  // not this rank's (a disk it lacks)
    rows[k] = rows_of(k);
    if (need[k] == 0.0f) {
      ++cal.cached;
      return median_row(rows[k]);
    }
    ++cal.measured;
    return measure();
  };
  const std::function<Result<std::vector<double>>()> measures[kSlots] = {
      [&]() -> Result<std::vector<double>> {
        STRATA_ASSIGN_OR_RETURN(const ComputeProbe p, measure_compute(rq));
        return std::vector<double>{p.layer_flops_per_s, p.head_flops_per_s, p.step_extra_s, p.op_s};
      },
      [&] { return measure_link(*rq.device); }, [&] { return measure_host(rq); },
      [&]() -> Result<std::vector<double>> {
        STRATA_ASSIGN_OR_RETURN(double t, measure_overhead(*rq.device, rq.host_threads));
        return std::vector<double>{t};
      },
      [&] { return measure_disk(rq); }};
  auto value = [&](int w) -> double& { return w < 0 ? other[-1 - w] : r.per_second[w]; };
  bool measured[kSlots] = {};
  for (int k = 0; k < kSlots; ++k) {
    STRATA_ASSIGN_OR_RETURN(std::vector<double> v, entry(Slot(k), measures[k]));
    if (v.empty()) continue;  // no disk
    measured[k] = need[k] != 0.0f;
    if (v.size() != kHolds[k].size()) {
      return make_error(ErrorCode::kInternal, "calibration entry '", keys[k], "' holds ", v.size(),
                        " values, not ", kHolds[k].size(), " (", cal.cache_path, ")");
    }
    for (size_t i = 0; i < v.size(); ++i) value(kHolds[k][i]) = v[i];
  }
  // Every rank takes the slowest rank's rates (the largest overhead and step-shaped extra): a
  // step waits at its collectives for the slowest rank, and every rank then predicts, plans and
  // chooses alike. (Two ranks probing at once on the test machine's two vCPUs have read 1.18e10
  // and 7.5e9 FLOP/s: one vCPU shared its core with another load, the other did not.)
  auto agree = [&]() -> Status {
    if (ranks <= 1) return ok_status();
    float slow[sched::kNumWorkKinds + kOthers];
    for (int k = 0; k < sched::kNumWorkKinds; ++k) slow[k] = -static_cast<float>(r.per_second[k]);
    for (int o = 0; o < kOthers; ++o) slow[sched::kNumWorkKinds + o] = static_cast<float>(other[o]);
    STRATA_RETURN_IF_ERROR(rq.comm->all_reduce(slow, slow, sched::kNumWorkKinds + kOthers,
                                               DType::kF32, comm::ReduceOp::kMax));
    for (int k = 0; k < sched::kNumWorkKinds; ++k) r.per_second[k] = -double(slow[k]);
    for (int o = 0; o < kOthers; ++o) other[o] = slow[sched::kNumWorkKinds + o];
    return ok_status();
  };
  STRATA_RETURN_IF_ERROR(agree());
  // What was measured now joins its entry's rows as agreed, and the entry's median is used (the
  // test machine's speed flips for seconds at a time, so that one calibration's compute rate
  // has read 0.6x or 1.6x the typical one; the median of the last few is the typical one).
  // The ranks read one cache file and come out alike; when their files differ, they agree
  // again.
  if (std::any_of(std::begin(measured), std::end(measured), [](bool b) { return b; })) {
    for (int k = 0; k < kSlots; ++k) {
      if (!measured[k]) continue;
      std::vector<double> v;
      for (int w : kHolds[k]) v.push_back(value(w));
      rows[k].push_back(v);
      if (rows[k].size() > kKept) rows[k].erase(rows[k].begin());
      mine[keys[k]] = rows[k];
      v = median_row(rows[k]);
      for (size_t i = 0; i < v.size(); ++i) value(kHolds[k][i]) = v[i];
    }
    STRATA_RETURN_IF_ERROR(agree());
  }
  r.task_overhead_s = other[kOverheadSlot];
  r.nvme_cpu_op_s = other[kNvmeCpuOpSlot];
  r.nvme_cpu_byte_s = other[kNvmeCpuByteSlot];
  r.disk_drains = other[kDiskDrainsSlot] >= 0.5;
  r.shared_cores = rq.device->kind() == gpu::DeviceKind::kCpu;
  // The executor's nvme workers issue their requests at once and the disk serves them together
  // (its rates above are its totals): on the test machine three small reads issued together all
  // completed after about three requests' time, not one after the other.
  r.nvme_workers = sched::ExecutorOptions{}.nvme_workers;
  r.shared_disk = true;
  r.cpu_workers = 1;
  ComputeProbe probe;
  probe.step_extra_s = other[kStepExtraSlot];
  probe.op_s = other[kOpTimeSlot];
  STRATA_ASSIGN_OR_RETURN(r.handoff_s, fit_handoff(probe, r, ranks));
  const bool lead = rq.comm == nullptr || rq.comm->rank() == 0;
  if (cal.measured > 0 && lead) STRATA_RETURN_IF_ERROR(write_cache(cal.cache_path, cache));
  return cal;
}

}  // namespace strata::planner
