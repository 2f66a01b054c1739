// bench_nvme: (1) sequential write then read of N GiB through the swap store, and the same
// workload through fio (same block size, queue depth, O_DIRECT, io_uring), side by side;
// (2) the pipelined optimizer step with all state on NVMe versus max(pure I/O time, pure Adam
// time) measured in the same run. Prints a table, then one JSON line. --fio-vs-fio measures the
// measurement itself: fio against a second fio under the same schedule. (3) The pipelined step
// on this rank's share of the threads, unbound against bound as train_gpt binds a rank
// (bench_placement.h; under mpirun each process is a rank): keys "bind_*".
#include <unistd.h>

#include <tbb/task_arena.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_placement.h"
#include "bench_util.h"
#include "cpu/cpu_adam.h"
#include "cpu/pinned_memory.h"
#include "engine/offloaded_optimizer.h"
#include "gpu/cpu_device.h"
#include "hash_load.h"
#include "nvme/swap_store.h"
#include "scheduler/executor.h"

using namespace strata;
using bench::Clock;
using bench::median;
using bench::seconds_since;

namespace {

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

// fio bandwidth in GB/s for one sequential pass, or nullopt when fio is missing or fails. fio is
// set up as the store is: O_DIRECT through io_uring, the same request size and depth, every
// free slot submitted at once and completions reaped from the first one, registered buffers
// when the store registered its own, a preallocated file (or several, `file` joined by ':', taken
// in turn as a striped store's files are), buffers not rewritten between requests (the store
// writes what the caller filled), and buffers of reserved huge pages when the store's are on
// them (--mem=shmhuge; fio has no way to transparent huge pages). With `check`,
// fio touches every byte as the store's checksums do: it writes a pattern and, reading, compares
// each block with it (--verify=pattern, the cheapest check fio has: a compare at memory speed).
std::optional<double> fio_gbps(const std::string& file, bool write, uint64_t size, uint64_t bs,
                               int depth, bool fixed_buffers, bool huge_pages, bool check) {
  const std::string verify =
      check ? std::string(" --verify=pattern --verify_pattern=0x5aa5c33c --verify_state_save=0") +
                  (write ? " --do_verify=0" : " --verify_only=1")
            : "";
  const std::string cmd =
      "fio --name=strata_seq --filename=" + file + " --rw=" + (write ? "write" : "read") +
      " --size=" + std::to_string(size) + " --bs=" + std::to_string(bs) +
      " --iodepth=" + std::to_string(depth) + " --iodepth_batch_submit=" + std::to_string(depth) +
      " --iodepth_batch_complete_min=1 --iodepth_batch_complete_max=" + std::to_string(depth) +
      " --fallocate=native --scramble_buffers=0 --direct=1 --numjobs=1" +
      (huge_pages ? " --mem=shmhuge" : "") + " --ioengine=io_uring" +
      " --fixedbufs=" + (fixed_buffers ? "1" : "0") + verify + " --output-format=json 2>/dev/null";
  const std::string out = run_command(cmd);
  const size_t brace = out.find('{');
  if (brace == std::string::npos) return std::nullopt;
  auto j = nlohmann::json::parse(out.substr(brace), nullptr, false);
  if (j.is_discarded() || !j.contains("jobs") || j["jobs"].empty()) return std::nullopt;
  const double bw = j["jobs"][0][write ? "write" : "read"]["bw_bytes"].get<double>();
  return bw / 1e9;
}

// How a pass kept the device supplied: the mean number of requests in flight while any was
// (`in_flight`), and the share of the pass with at least one in flight (`busy`).
struct PassStats {
  double in_flight = 0;
  double busy = 0;
};

// One sequential pass through the store: objects of object_bytes, one per buffer in flight.
Result<double> store_pass(nvme::SwapStore& store, bool write, uint64_t total, uint64_t object_bytes,
                          std::vector<cpu::PinnedBuffer>& bufs, PassStats& stats) {
  const nvme::SwapQueueStats before = store.queue_stats();
  const uint64_t objects = std::max<uint64_t>(1, total / object_bytes);
  std::vector<nvme::IoHandle> h(bufs.size());
  const auto t0 = Clock::now();
  for (uint64_t k = 0; k < objects; ++k) {
    auto& slot = h[k % bufs.size()];
    if (slot.valid()) STRATA_RETURN_IF_ERROR(slot.wait());
    slot = write ? store.write(k, bufs[k % bufs.size()].data(), object_bytes)
                 : store.read(k, bufs[k % bufs.size()].data(), object_bytes);
  }
  for (auto& x : h) {
    if (x.valid()) STRATA_RETURN_IF_ERROR(x.wait());
  }
  const double seconds = seconds_since(t0);
  const nvme::SwapQueueStats after = store.queue_stats();
  const double busy = after.busy_seconds - before.busy_seconds;
  stats.in_flight = busy > 0 ? (after.in_flight_seconds - before.in_flight_seconds) / busy : 0;
  stats.busy = seconds > 0 ? busy / seconds : 0;
  return static_cast<double>(objects * object_bytes) / seconds / 1e9;
}

// Reserved huge pages free now (/proc/meminfo HugePages_Free), in bytes.
uint64_t free_huge_page_bytes() {
  const std::string out =
      run_command("awk '/^HugePages_Free|^Hugepagesize/ {print $2}' /proc/meminfo");
  unsigned long long pages = 0, kib = 0;
  if (std::sscanf(out.c_str(), "%llu %llu", &pages, &kib) != 2) return 0;
  return pages * kib * 1024;
}

int fail(const Status& st) {
  std::fprintf(stderr, "bench_nvme: %s\n", st.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"NVMe swap store and pipelined optimizer step benchmark"};
  bool quick = false;
  std::string dir = ".";
  double size_gib = 0;
  uint64_t block_bytes = 1 << 20;
  int depth = 32;
  int repeats = 5;
  int64_t step_params = 0;
  int64_t partition_numel = 0;
  int staging_slots = 3;
  bool no_verify = false;
  app.add_flag("--quick", quick, "small sizes (under 30 s)");
  app.add_option("--dir", dir, "directory for the swap and fio files (a real disk)");
  app.add_option("--size-gib", size_gib, "GiB written and read (default 4, quick 0.5)");
  app.add_option("--block-size", block_bytes, "bytes per request (multiple of 4096)");
  app.add_option("--queue-depth", depth,
                 "requests in flight: the depth of the optimizer step and of the JSON's "
                 "write_gbps and the other single-depth keys (added to --depths)")
      ->check(CLI::Range(1, 4096));
  std::vector<int> depths = {8, 32, 128};
  int stripe = 2;
  app.add_option("--stripe", stripe,
                 "also the store striped over this many directories under --dir (the same disk), "
                 "at --queue-depth; 1: not")
      ->check(CLI::Range(1, 16));
  app.add_option("--depths", depths, "queue depths of the sequential comparison with fio")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app.add_option("--repeats", repeats, "timed repeats (median; quick: 3)")
      ->check(CLI::Range(1, 100));
  app.add_option("--step-params", step_params, "optimizer elements (default 128M, quick 32M)");
  app.add_option("--partition-numel", partition_numel,
                 "elements per partition (default 8M, quick 4M)");
  app.add_option("--staging-slots", staging_slots, "optimizer staging slots (>= 3)")
      ->check(CLI::Range(3, 64));
  app.add_flag("--no-checksums", no_verify, "switch checksum hashing and verification off");
  bool no_huge = false;
  int object_mib = 0;
  int buffers = 4;
  app.add_option("--object-mib", object_mib,
                 "MiB per store write or read in the sequential passes, from --buffers buffers "
                 "(default 0: fio's buffer footprint, four objects of depth x block / 4)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--buffers", buffers, "with --object-mib: objects in flight (default 4)")
      ->check(CLI::Range(1, 64));
  app.add_flag("--no-huge-pages", no_huge,
               "pinned buffers of 4 KiB pages only (as fio's): see cpu/pinned_memory.h");
  bool fio_vs_fio = false;
  app.add_flag("--fio-vs-fio", fio_vs_fio,
               "the measurement's own noise: the store's passes replaced by a second fio on its "
               "own file, same settings and schedule (the ratios are then fio over fio)");
  CLI11_PARSE(app, argc, argv);
  if (size_gib <= 0) size_gib = quick ? 0.5 : 4.0;
  if (quick && app.count("--repeats") == 0) repeats = 3;
  if (std::find(depths.begin(), depths.end(), depth) == depths.end()) depths.push_back(depth);
  std::sort(depths.begin(), depths.end());
  if (step_params <= 0) step_params = quick ? (32ll << 20) : (128ll << 20);
  if (partition_numel <= 0) partition_numel = quick ? (4ll << 20) : (8ll << 20);
  if (block_bytes == 0 || block_bytes % 4096 != 0) {
    std::fprintf(stderr, "bench_nvme: --block-size %llu is not accepted (a multiple of 4096)\n",
                 static_cast<unsigned long long>(block_bytes));
    return 1;
  }
  if (!std::filesystem::is_directory(dir)) {
    std::fprintf(stderr, "bench_nvme: --dir '%s' is not a directory\n", dir.c_str());
    return 1;
  }
  // The store's objects: by default as many bytes of buffers as fio has (depth x block: fio
  // reuses one buffer per request slot), in four objects, so that the first ones completed are
  // refilled while the rest are still verified or in flight (this disk completes a deep queue
  // in one burst: with two objects, half the verification left the queue empty). Buffer
  // footprint matters on a virtual disk served from the host's page cache
  // (docs/benchmarks.md): the host copies into buffers still in its cache faster.
  const bool fio_footprint = object_mib == 0;
  if (fio_footprint) buffers = 4;
  const int max_depth = std::max(depth, *std::max_element(depths.begin(), depths.end()));
  auto object_bytes_at = [&](int d) {
    return fio_footprint ? std::max<uint64_t>(block_bytes, uint64_t(d) * block_bytes / 4)
                         : uint64_t(object_mib) << 20;
  };
  const uint64_t largest_object = object_bytes_at(max_depth);
  const uint64_t total =
      std::max<uint64_t>(largest_object, static_cast<uint64_t>(size_gib * (1ull << 30)) /
                                             largest_object * largest_object);

  std::printf("== device under %s ==\n%s", dir.c_str(), run_command("df -hT " + dir).c_str());
  const std::string src = run_command("df --output=source " + dir + " | tail -1");
  std::printf(
      "%s",
      run_command("command -v lsblk >/dev/null && lsblk -o NAME,MODEL,SIZE,ROTA,TYPE 2>/dev/null")
          .c_str());

  cpu::PinnedPoolOptions pool_options;
  pool_options.huge_pages = !no_huge;
  cpu::PinnedPool pool(pool_options);
  nvme::SwapStoreOptions so;
  so.dirs = {dir};
  so.capacity_bytes = total;
  so.extent_bytes = block_bytes;
  so.block_bytes = block_bytes;
  so.queue.queue_depth = static_cast<uint32_t>(depth);
  so.verify_checksums = !no_verify;
  // The store's buffers are allocated afresh for each of its passes and freed after it, as fio's
  // are (a new process per pass). On this VM the rate of reads depends on which physical pages
  // they land in, by up to 20% from one 32 MiB window to the next and steadily so within a
  // process (docs/benchmarks.md): buffers kept for the whole run would tie every store pass to
  // one draw. Reserved huge pages are handed out last freed, first taken, so the store and the
  // fio passes beside it mostly read into the same pages.
  auto fresh_buffers = [&](uint64_t object_bytes) -> Result<std::vector<cpu::PinnedBuffer>> {
    std::vector<cpu::PinnedBuffer> out;
    for (int i = 0; i < buffers; ++i) {
      STRATA_ASSIGN_OR_RETURN(cpu::PinnedBuffer b, pool.allocate(object_bytes));
      for (uint64_t k = 0; k + 8 <= object_bytes; k += 8)
        *reinterpret_cast<uint64_t*>(b.bytes() + k) = k * 2654435761u + i;
      out.push_back(std::move(b));
    }
    return out;
  };
  auto regions_of = [](const std::vector<cpu::PinnedBuffer>& bufs) {
    std::vector<nvme::BufferRegion> regions;
    for (const auto& b : bufs) regions.push_back({b.data(), b.mapped_bytes()});
    return regions;
  };
  // Whether the store's buffers get reserved huge pages (cpu/pinned_memory.h), from a probe.
  bool store_reserved = false;
  {
    auto probe = fresh_buffers(largest_object);
    if (!probe.ok()) return fail(probe.status());
    store_reserved = std::all_of(probe->begin(), probe->end(), [](const cpu::PinnedBuffer& b) {
      return b.on_reserved_huge_pages();
    });
  }
  // Reserved huge pages for the store's buffers and the deepest fio's, with a little slack.
  const uint64_t huge_pages_wanted =
      (uint64_t(buffers) * largest_object + uint64_t(max_depth) * block_bytes) /
          cpu::kHugePageBytes +
      8;
  // Per queue depth: a store of that depth, then repeats of store write, fio write, store read,
  // fio read, the store first on even repeats and fio first on odd ones (rep 0 is the warm-up);
  // the ratios are per repeat (neighbouring passes), their median and range reported.
  struct DepthRow {
    int depth = 0;
    size_t dirs = 1;
    uint64_t object_bytes = 0;
    std::vector<double> w, r, fw, fr, fr_plain, w_ratio, r_ratio, w_depth, r_depth;
    std::vector<double> fw_hashing, w_ratio_hashing;  // fio writing beside a HashLoad
  };
  std::vector<DepthRow> rows;
  std::string setup;
  bool fio_huge_all = true;  // every fio run's buffers were of the same pages as the store's
  // The last row: the store striped over `stripe` directories on the same disk, at --queue-depth,
  // against fio over one file in each of those directories.
  std::vector<std::pair<int, size_t>> configs;
  for (int d : depths) configs.emplace_back(d, 1);
  if (stripe > 1) configs.emplace_back(depth, static_cast<size_t>(stripe));
  for (const auto& [d, ndirs] : configs) {
    DepthRow row;
    row.depth = d;
    row.dirs = ndirs;
    row.object_bytes = object_bytes_at(d);
    so.queue.queue_depth = static_cast<uint32_t>(d);
    so.dirs = {dir};
    if (ndirs > 1) {
      so.dirs.clear();
      for (size_t i = 0; i < ndirs; ++i) {
        so.dirs.push_back(dir + "/strata_bench_stripe" + std::to_string(i));
        std::filesystem::create_directories(so.dirs.back());
      }
    }
    auto store = nvme::SwapStore::open(so);
    if (!store.ok()) return fail(store.status());
    std::string desc;
    {
      auto probe = fresh_buffers(row.object_bytes);
      if (!probe.ok()) return fail(probe.status());
      if (Status st = (*store)->register_buffers(regions_of(*probe)); !st.ok()) return fail(st);
      desc = (*store)->describe();
      if (Status st = (*store)->register_buffers({}); !st.ok()) return fail(st);
    }
    if (d == depth && ndirs == 1) setup = desc;
    const bool fixed = desc.find("fixed buffers") != std::string::npos;
    // fio's buffers as the store's: reserved huge pages (--mem=shmhuge: depth x block, rounded
    // up to whole pages, and one more) when the store's are and enough are free; else 4 KiB
    // pages, as the store's only with --no-huge-pages (fio has no way to transparent huge pages).
    const uint64_t fio_need = uint64_t(d) * block_bytes + 2 * cpu::kHugePageBytes;
    const bool fio_huge = store_reserved && free_huge_page_bytes() >= fio_need;
    if (!no_huge && !fio_huge) {
      std::printf(
          "depth %d: fio's buffers are of 4 KiB pages, the store's of %s huge pages (not like for "
          "like): reserve huge pages for both, "
          "echo %llu > /proc/sys/vm/nr_hugepages\n",
          d, store_reserved ? "reserved" : "transparent",
          static_cast<unsigned long long>(huge_pages_wanted));
    }
    fio_huge_all = fio_huge_all && (fio_huge || no_huge);
    // fio's file, or with a striped store one file in each of its directories: fio then
    // spreads the size over them and takes them in turn, one request each (its default
    // round-robin file service), as the store's 1 MiB extents alternate between its files.
    std::vector<std::string> fio_paths;
    const auto fio_files = [&](const std::string& name) {
      std::string joined;
      for (const auto& sd : (ndirs > 1 ? so.dirs : std::vector<std::string>{dir})) {
        fio_paths.push_back(sd + "/" + name);
        joined += (joined.empty() ? "" : ":") + fio_paths.back();
      }
      return joined;
    };
    const std::string fio_file = fio_files("strata_bench_fio.bin");
    const bool check = !no_verify;
    auto fio = [&](bool write, bool with_check) {
      return fio_gbps(fio_file, write, total, block_bytes, d, fixed, fio_huge, with_check);
    };
    // The pass compared with fio: the store's, or with --fio-vs-fio a second fio on its own file
    // (fio keeps its depth in flight; its stats are not printed).
    const std::string fio_file_b = fio_files("strata_bench_fio_b.bin");
    auto measured_pass = [&](bool write, PassStats& stats) -> Result<double> {
      if (!fio_vs_fio) {
        STRATA_ASSIGN_OR_RETURN(auto bufs, fresh_buffers(row.object_bytes));
        STRATA_RETURN_IF_ERROR((*store)->register_buffers(regions_of(bufs)));
        auto gbps = store_pass(**store, write, total, row.object_bytes, bufs, stats);
        // Unregistered before they are freed: registration holds the pages.
        STRATA_RETURN_IF_ERROR((*store)->register_buffers({}));
        return gbps;
      }
      stats = {double(d), 1.0};
      auto g = fio_gbps(fio_file_b, write, total, block_bytes, d, fixed, fio_huge, check);
      if (!g) return make_error(ErrorCode::kIo, "--fio-vs-fio: fio is missing or failed");
      return *g;
    };
    // With checksums, fio also writes beside a thread hashing what the store hashes (depth x
    // block bytes at a time, at the store's last write rate): on this VM the hashing slows the
    // disk itself (docs/benchmarks.md), and this comparison leaves that toll out.
    const bool beside_hashing = check && !fio_vs_fio;
    double store_write_gbps = 0;
    auto fio_beside_hashing = [&]() -> std::optional<double> {
      if (!beside_hashing || store_write_gbps <= 0) return std::nullopt;
      bench::HashLoad load(uint64_t(d) * block_bytes, store_write_gbps * 1e9);
      return fio(true, check);
    };
    for (int rep = 0; rep <= repeats; ++rep) {
      const bool fio_first = rep % 2 == 1;
      std::optional<double> fa, fb, fb_plain, fa_hashing;
      if (fio_first) fa = fio(true, check);
      if (fio_first) fa_hashing = fio_beside_hashing();
      PassStats wd, rd;
      auto a = measured_pass(true, wd);
      if (!a.ok()) return fail(a.status());
      store_write_gbps = *a;
      if (!fio_first) fa_hashing = fio_beside_hashing();
      if (!fio_first) fa = fio(true, check);
      if (fio_first) fb = fio(false, check);
      auto b = measured_pass(false, rd);
      if (!b.ok()) return fail(b.status());
      if (!fio_first) fb = fio(false, check);
      if (check) fb_plain = fio(false, false);  // what reading without looking costs
      if (rep == 0) continue;
      row.w.push_back(*a);
      row.r.push_back(*b);
      row.w_depth.push_back(wd.in_flight);
      row.r_depth.push_back(rd.in_flight);
      if (fa && fb) {
        row.fw.push_back(*fa);
        row.fr.push_back(*fb);
        row.w_ratio.push_back(*a / *fa);
        row.r_ratio.push_back(*b / *fb);
      }
      if (fb_plain) row.fr_plain.push_back(*fb_plain);
      if (fa_hashing) {
        row.fw_hashing.push_back(*fa_hashing);
        row.w_ratio_hashing.push_back(*a / *fa_hashing);
      }
      std::printf("depth %3d, %zu dir(s), repeat %d: %s write %.3f read %.3f GB/s", d, ndirs, rep,
                  fio_vs_fio ? "second fio" : "store", *a, *b);
      if (!fio_vs_fio) {
        std::printf(" (in flight %.1f, %.1f; busy %.0f%%, %.0f%%)", wd.in_flight, rd.in_flight,
                    100 * wd.busy, 100 * rd.busy);
      }
      std::printf(", fio write %.3f read %.3f GB/s", fa.value_or(0.0), fb.value_or(0.0));
      if (fb_plain) std::printf(", fio read unchecked %.3f GB/s", *fb_plain);
      if (fa_hashing) std::printf(", fio write beside hashing %.3f GB/s", *fa_hashing);
      std::printf("\n");
    }
    for (const auto& f : fio_paths) std::filesystem::remove(f);
    store->reset();
    if (ndirs > 1) {
      for (const auto& sd : so.dirs) std::filesystem::remove(sd);
    }
    rows.push_back(std::move(row));
  }
  so.queue.queue_depth = static_cast<uint32_t>(depth);  // the optimizer step's store below
  so.dirs = {dir};
  const bool have_fio = std::all_of(rows.begin(), rows.end(), [](const DepthRow& x) {
    return !x.w_ratio.empty() && !x.r_ratio.empty();
  });
  auto range = [](std::vector<double> v) {
    if (v.empty()) return std::string("-");
    std::sort(v.begin(), v.end());
    char buf[48];
    std::snprintf(buf, sizeof(buf), "%.2f-%.2f", v.front(), v.back());
    return std::string(buf);
  };
  std::printf("\n== sequential %.2f GiB, block %llu B, median of %d repeats ==\n",
              total / double(1ull << 30), static_cast<unsigned long long>(block_bytes), repeats);
  if (fio_vs_fio) {
    std::printf(
        "--fio-vs-fio: the 'store' columns are a second fio on its own file, same settings and "
        "schedule: the ratios show what this disk's noise alone gives\n");
  }
  std::printf("store: %s; buffers %s\n", setup.c_str(),
              no_huge          ? "of 4 KiB pages"
              : store_reserved ? "on reserved 2 MiB huge pages"
                               : "advised for transparent 2 MiB huge pages");
  std::printf(
      "store objects: %s; fio: %s\n",
      fio_footprint
          ? "four of depth x block / 4 (fio's buffer bytes: depth x block)"
          : (std::to_string(buffers) + " of " + std::to_string(object_mib) + " MiB").c_str(),
      no_verify ? "plain reads and writes (store checksums off)"
                : "writes a pattern and compares every block it reads with it (store checksums "
                  "on); 'unchecked': fio reading without looking at the data");
  std::printf(
      "in flight: the store's mean requests in flight while busy; ratio: median of the per-repeat "
      "ratios\n");
  std::printf("%5s %4s %-6s %7s %10s %9s %10s %8s %11s %10s\n", "depth", "dirs", "", "obj MiB",
              "store GB/s", "in flight", "fio GB/s", "ratio", "range", "unchecked");
  nlohmann::json w_by_depth = nlohmann::json::object(), r_by_depth = nlohmann::json::object();
  nlohmann::json unchecked_by_depth = nlohmann::json::object();
  const DepthRow* main_row = &rows.front();
  nlohmann::json stripe_w(nullptr), stripe_r(nullptr);
  for (const DepthRow& row : rows) {
    const double wq = have_fio ? median(row.w_ratio) : 0, rq = have_fio ? median(row.r_ratio) : 0;
    const double obj_mib = row.object_bytes / double(1 << 20);
    std::printf("%5d %4zu %-6s %7.1f %10.3f %9.1f %10.3f %8.3f %11s\n", row.depth, row.dirs,
                "write", obj_mib, median(row.w), median(row.w_depth),
                have_fio ? median(row.fw) : 0.0, wq, range(row.w_ratio).c_str());
    std::printf("%5d %4zu %-6s %7.1f %10.3f %9.1f %10.3f %8.3f %11s", row.depth, row.dirs, "read",
                obj_mib, median(row.r), median(row.r_depth), have_fio ? median(row.fr) : 0.0, rq,
                range(row.r_ratio).c_str());
    if (!row.fr_plain.empty()) std::printf(" %10.3f", median(row.fr_plain));
    std::printf("\n");
    const nlohmann::json wj = have_fio ? nlohmann::json(wq) : nlohmann::json(nullptr);
    const nlohmann::json rj = have_fio ? nlohmann::json(rq) : nlohmann::json(nullptr);
    if (row.dirs > 1) {
      stripe_w = wj;
      stripe_r = rj;
      continue;
    }
    if (row.depth == depth) main_row = &row;
    w_by_depth[std::to_string(row.depth)] = wj;
    r_by_depth[std::to_string(row.depth)] = rj;
    unchecked_by_depth[std::to_string(row.depth)] =
        row.fr_plain.empty() ? nlohmann::json(nullptr) : nlohmann::json(median(row.fr_plain));
  }
  // Writes against fio beside the store's hashing (with checksums, not --fio-vs-fio).
  nlohmann::json w_hashing_by_depth(nullptr), stripe_w_hashing(nullptr);
  const bool have_hashing = std::all_of(
      rows.begin(), rows.end(), [](const DepthRow& x) { return !x.w_ratio_hashing.empty(); });
  if (have_fio && have_hashing) {
    w_hashing_by_depth = nlohmann::json::object();
    std::printf(
        "\nwrites against fio beside a thread hashing as the store does (depth x block bytes at a "
        "time, at the store's write rate; this VM's disk slows with the guest's CPU work):\n");
    std::printf("%5s %4s %-6s %10s %15s %8s %11s\n", "depth", "dirs", "", "store GB/s",
                "fio+hash GB/s", "ratio", "range");
    for (const DepthRow& row : rows) {
      const double q = median(row.w_ratio_hashing);
      std::printf("%5d %4zu %-6s %10.3f %15.3f %8.3f %11s\n", row.depth, row.dirs, "write",
                  median(row.w), median(row.fw_hashing), q, range(row.w_ratio_hashing).c_str());
      if (row.dirs > 1) {
        stripe_w_hashing = q;
      } else {
        w_hashing_by_depth[std::to_string(row.depth)] = q;
      }
    }
  }
  if (!have_fio)
    std::printf("fio not found on PATH or failed: no fio figures (scripts/setup installs it)\n");
  std::fflush(stdout);  // the table before the step part's log lines (stderr)
  const double wm = median(main_row->w), rm = median(main_row->r);
  const double fwm = have_fio ? median(main_row->fw) : 0, frm = have_fio ? median(main_row->fr) : 0;
  const double wq = have_fio ? median(main_row->w_ratio) : 0;
  const double rq = have_fio ? median(main_row->r_ratio) : 0;

  // ---- pipelined optimizer step, all state on NVMe ----
  const int64_t parts_n = std::max<int64_t>(1, step_params / partition_numel);
  std::vector<int64_t> parts(static_cast<size_t>(parts_n), partition_numel);
  const uint64_t state = 12ull * partition_numel * parts_n;
  nvme::SwapStoreOptions so2 = so;
  so2.capacity_bytes = state + (16ull << 20);
  auto store = nvme::SwapStore::open(so2);
  if (!store.ok()) return fail(store.status());
  cpu::AdamHyper hyper;
  cpu::CpuAdam adam(hyper);
  gpu::DeviceOptions plan_dev_opts;  // the executor's streams; this plan uses host lanes only
  plan_dev_opts.memory_limit_bytes = 1 << 20;
  auto plan_dev = gpu::create_cpu_device(plan_dev_opts);
  if (!plan_dev.ok()) return fail(plan_dev.status());
  gpu::Device* plan_device = plan_dev->get();
  engine::OffloadedOptimizerOptions oo;
  oo.nvme_fraction = 1.0;
  oo.store = store->get();
  oo.pool = &pool;
  oo.staging_slots = staging_slots;
  auto opt = engine::OffloadedOptimizer::create(parts, adam, oo);
  if (!opt.ok()) return fail(opt.status());
  auto grads = pool.allocate(2 * partition_numel);
  auto out16 = pool.allocate(2 * partition_numel);
  if (!grads.ok() || !out16.ok()) return fail(grads.ok() ? out16.status() : grads.status());
  auto* g16 = grads->as<uint16_t>();
  for (int64_t k = 0; k < partition_numel; ++k)
    g16[k] = f32_to_bf16(1e-3f * static_cast<float>(k % 1000 - 500));
  std::vector<engine::PartitionGrad> pg(
      parts.size(),
      engine::PartitionGrad{grads->data(), DType::kBF16, out16->data(), DType::kBF16});
  // Baselines use their own slots of the same size and number, so memory behaviour matches.
  std::vector<cpu::PinnedBuffer> slots;
  const size_t ns = static_cast<size_t>(staging_slots);
  for (size_t s = 0; s < ns; ++s) {
    auto b = pool.allocate(12ull * partition_numel);
    if (!b.ok()) return fail(b.status());
    slots.push_back(std::move(b).value());
  }
  const uint64_t pbytes = 12ull * partition_numel;
  // Pure I/O: the step's reads and writes in the step's pattern (read partition j while
  // partition j-1 is written back, through the same number of slots), with no compute between.
  auto time_io = [&]() -> Result<double> {
    const auto t0 = Clock::now();
    std::vector<nvme::IoHandle> rd(ns), wr(ns);
    const size_t n = parts.size();
    for (size_t j = 0; j <= n; ++j) {
      if (j < n) {
        const size_t sl = j % ns;
        if (wr[sl].valid()) STRATA_RETURN_IF_ERROR(wr[sl].wait());
        rd[sl] = (*store)->read(oo.key_base + j, slots[sl].data(), pbytes);
      }
      if (j >= 1) {
        const size_t prev = (j - 1) % ns;
        STRATA_RETURN_IF_ERROR(rd[prev].wait());
        wr[prev] = (*store)->write(oo.key_base + j - 1, slots[prev].data(), pbytes);
      }
    }
    for (auto& x : wr) {
      if (x.valid()) STRATA_RETURN_IF_ERROR(x.wait());
    }
    return seconds_since(t0);
  };
  // Pure Adam: the same updates on the resident slots.
  auto time_adam = [&](int step) -> Result<double> {
    const auto t0 = Clock::now();
    for (size_t j = 0; j < parts.size(); ++j) {
      auto* p = slots[j % ns].as<float>();
      cpu::AdamBuffers b{p,
                         p + partition_numel,
                         p + 2 * partition_numel,
                         grads->data(),
                         DType::kBF16,
                         out16->data(),
                         DType::kBF16,
                         partition_numel};
      STRATA_RETURN_IF_ERROR(adam.step(b, cpu::AdamStep{step, 1.0f}));
    }
    return seconds_since(t0);
  };
  auto time_step = [&](int step) -> Result<double> {
    const auto t0 = Clock::now();
    STRATA_RETURN_IF_ERROR(opt->step(pg, cpu::AdamStep{step, 1.0f}));
    return seconds_since(t0);
  };
  // The same step as a scheduler plan (what the planned trainer step runs): per partition a
  // read on the nvme lane into a staging buffer, the Adam on the cpu lane, the write behind on
  // the nvme lane; read-ahead bounded by a pinned budget of the same number of slots.
  int plan_step = 0;
  auto make_plan_executor = [&]() -> Result<std::unique_ptr<sched::Executor>> {
    sched::Plan plan;
    for (size_t j = 0; j < parts.size(); ++j) {
      const std::string n = std::to_string(j);
      const sched::BufferId buf =
          plan.add_buffer("state " + n, sched::Tier::kPinnedHost, opt->state_bytes(j));
      const sched::TaskId rd =
          plan.add("read " + n, sched::Lane::kNvme, [&, j, buf](const sched::TaskContext& c) {
            return opt->read_partition(j, c.buffer(buf)).wait();
          });
      plan.acquire(rd, buf);
      plan.writes(rd, buf);
      const sched::TaskId ad = plan.add(
          "adam " + n, sched::Lane::kCpu,
          [&, j, buf](const sched::TaskContext& c) {
            return opt->step_partition(j, c.buffer(buf), pg[j], cpu::AdamStep{plan_step, 1.0f});
          },
          {rd});
      plan.reads(ad, buf);
      plan.writes(ad, buf);
      const sched::TaskId wr = plan.add("write " + n, sched::Lane::kNvme,
                                        [&, j, buf](const sched::TaskContext& c) {
                                          return opt->write_partition(j, c.buffer(buf)).wait();
                                        },
                                        {ad});
      plan.reads(wr, buf);
      plan.release(wr, buf);
    }
    sched::Budgets budgets;
    budgets.bytes[static_cast<int>(sched::Tier::kPinnedHost)] =
        static_cast<uint64_t>(staging_slots) * ((opt->state_bytes(0) + 4095) / 4096 * 4096);
    STRATA_RETURN_IF_ERROR(plan.finalize(budgets));
    sched::ExecutorOptions eo;
    eo.pool = &pool;
    eo.cpu_threads = static_cast<int>(std::thread::hardware_concurrency());
    eo.nvme_workers = staging_slots + 1;
    return sched::Executor::create(*plan_device, std::move(plan), eo);
  };
  auto plan_ex = make_plan_executor();
  if (!plan_ex.ok()) return fail(plan_ex.status());
  auto time_plan_step = [&](int step) -> Result<double> {
    plan_step = step;
    const auto t0 = Clock::now();
    STRATA_RETURN_IF_ERROR((*plan_ex)->replay());
    return seconds_since(t0);
  };
  // rep 0 is the warm-up; the step and the baselines alternate order (ABBA) and the ratio is
  // the median of the per-repeat ratios, as in the sequential part.
  std::vector<double> t_step, t_io, t_adam, step_ratio, t_plan, plan_ratio;
  for (int rep = 0; rep <= repeats; ++rep) {
    Result<double> ts = 0.0, tio = 0.0, tad = 0.0, tp = 0.0;
    if (rep % 2 == 1) {
      tio = time_io();
      tad = time_adam(rep + 1);
      tp = time_plan_step(rep + 1);
      ts = time_step(rep + 1);
    } else {
      ts = time_step(rep + 1);
      tp = time_plan_step(rep + 1);
      tio = time_io();
      tad = time_adam(rep + 1);
    }
    if (!ts.ok()) return fail(ts.status());
    if (!tp.ok()) return fail(tp.status());
    if (!tio.ok()) return fail(tio.status());
    if (!tad.ok()) return fail(tad.status());
    if (rep == 0) continue;
    t_step.push_back(*ts);
    t_io.push_back(*tio);
    t_adam.push_back(*tad);
    step_ratio.push_back(*ts / std::max(*tio, *tad));
    t_plan.push_back(*tp);
    plan_ratio.push_back(*tp / std::max(*tio, *tad));
    std::printf("repeat %d: step %.3f s, planned step %.3f s, pure I/O %.3f s, pure Adam %.3f s\n",
                rep, *ts, *tp, *tio, *tad);
  }
  const double s_med = median(t_step), io_med = median(t_io), ad_med = median(t_adam);
  const double ratio = median(step_ratio);
  std::printf(
      "\n== optimizer step, %lld params in %lld partitions, all state on NVMe (%.2f GiB), median "
      "of %d ==\n",
      static_cast<long long>(parts_n * partition_numel), static_cast<long long>(parts_n),
      state / double(1ull << 30), repeats);
  std::printf("staging bound: %llu bytes (%d slots x 12 B x %lld elements, page-rounded)\n",
              static_cast<unsigned long long>(opt->staging_bytes()), oo.staging_slots,
              static_cast<long long>(partition_numel));
  std::printf("%-28s %10.3f s\n", "pure I/O (same pattern)", io_med);
  std::printf("%-28s %10.3f s\n", "pure CPU Adam", ad_med);
  std::printf("%-28s %10.3f s\n", "pipelined step", s_med);
  std::printf("%-28s %10.3f\n", "step / max(io, adam)", ratio);
  std::printf("%-28s %10.3f s\n", "planned step (nvme lane)", median(t_plan));
  std::printf("%-28s %10.3f\n", "planned / max(io, adam)", median(plan_ratio));
  std::printf(
      "last planned step: %s\n",
      sched::compute_metrics((*plan_ex)->plan(), (*plan_ex)->last_trace()).describe().c_str());

  int bind_step = repeats + 2;
  auto bind = strata::bench::compare_bound(repeats, [&](int threads) -> Result<double> {
    tbb::task_arena arena(threads);
    Result<double> t = 0.0;
    arena.execute([&] { t = time_step(bind_step++); });
    return t;
  });
  if (!bind.ok()) return fail(bind.status());
  std::printf("\n== pipelined step, bound against unbound (%s) ==\n", bind->placement.c_str());
  std::printf("%-28s %10.3f s\n", "unbound", bind->unbound_s);
  std::printf("%-28s %10.3f s\n", "bound", bind->bound_s);
  std::printf("%-28s %10.3f\n", "bound/unbound speed", bind->bound_over_unbound());

  nlohmann::json j;
  j["bench"] = "nvme";
  j["quick"] = quick;
  j["device"] = src.substr(0, src.find('\n'));
  j["size_bytes"] = total;
  j["block_bytes"] = block_bytes;
  j["queue_depth"] = depth;
  j["write_gbps"] = wm;
  j["read_gbps"] = rm;
  j["fio_write_gbps"] = have_fio ? nlohmann::json(fwm) : nlohmann::json(nullptr);
  j["fio_read_gbps"] = have_fio ? nlohmann::json(frm) : nlohmann::json(nullptr);
  j["write_over_fio"] = have_fio ? nlohmann::json(wq) : nlohmann::json(nullptr);
  j["read_over_fio"] = have_fio ? nlohmann::json(rq) : nlohmann::json(nullptr);
  j["write_over_fio_by_depth"] = w_by_depth;
  j["read_over_fio_by_depth"] = r_by_depth;
  j["write_over_fio_beside_hashing_by_depth"] = w_hashing_by_depth;
  j["stripe_dirs"] = stripe;
  j["stripe_write_over_fio"] = stripe_w;
  j["stripe_read_over_fio"] = stripe_r;
  j["stripe_write_over_fio_beside_hashing"] = stripe_w_hashing;
  j["checksums"] = !no_verify;
  j["fio_checks_reads"] = !no_verify;
  j["fio_read_unchecked_gbps_by_depth"] = unchecked_by_depth;
  j["object_bytes"] =
      fio_footprint ? nlohmann::json("fio footprint") : nlohmann::json(uint64_t(object_mib) << 20);
  j["huge_pages"] = !no_huge;
  j["fio_like_for_like_pages"] = fio_huge_all;
  j["store_buffers_on_reserved_huge_pages"] = store_reserved;
  j["fio_vs_fio"] = fio_vs_fio;
  j["step_s"] = s_med;
  j["pure_io_s"] = io_med;
  j["pure_adam_s"] = ad_med;
  j["pipelined_step_over_max"] = ratio;
  j["planned_step_s"] = median(t_plan);
  j["planned_step_over_max"] = median(plan_ratio);
  j["staging_bytes"] = opt->staging_bytes();
  j["bind_threads"] = bind->threads;
  j["bind_unbound_step_s"] = bind->unbound_s;
  j["bind_bound_step_s"] = bind->bound_s;
  j["bind_bound_over_unbound"] = bind->bound_over_unbound();
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
