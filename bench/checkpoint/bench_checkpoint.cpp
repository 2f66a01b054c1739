// bench_checkpoint: saving and loading a checkpoint (engine/checkpoint.h) of a GPT whose
// optimizer state is half on NVMe (the swap store in --dir), against the disk's own rate for the
// same bytes (one file written in 1 MiB requests and synced, then read back, in the same
// directory, on both sides of each repeat: the ratios are per repeat, medians reported), and the
// exposed cost of checkpointing: the planned step's time with a checkpoint after every step
// against none (alternating, medians). The page cache is dropped for the files (posix_fadvise)
// before every read, so reads come from the disk. A save also reads the NVMe half of the optimizer
// state through the swap store, from the same disk. The exposed cost is measured as train_gpt
// checkpoints: the optimizer file written in the background during the next step, the save finished
// after it (engine/checkpoint.h); in steady state, with a checkpoint after every step, each step
// costs its run, the previous save's finish and this save's start. Prints a table, then one JSON
// line: bench, save_gbps, load_gbps, disk_gbps (write), disk_read_gbps, save_over_disk,
// load_over_disk, exposed_save_fraction, step_s, checkpointed_step_s, update_wait_s.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "bench_util.h"
#include "comm/local_comm.h"
#include "engine/checkpoint.h"
#include "engine/session.h"
#include "gpu/cpu_device.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/model_file.h"
#include "nvme/swap_store.h"

using namespace strata;
using bench::Clock;
using bench::median;
using bench::seconds_since;
namespace fs = std::filesystem;

namespace {

STRATA_BENCH_CHECKS("bench_checkpoint")

// Drops the page cache of every file under `path`.
void drop_cache(const fs::path& path) {
  for (const auto& e : fs::recursive_directory_iterator(path)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Before each timed disk operation: everything written so far on its way to the disk, then a pause.
// This virtual disk absorbs a burst of writes and then slows for a while: without the pause, what
// runs right after a save or load would see the disk slower than what runs after a step.
void settle() {
  ::sync();
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
}

uint64_t bytes_under(const fs::path& path) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(path)) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

// The disk's rate for `bytes`: `file` written in 1 MiB requests and synced, then read back
// uncached. The file stays (the caller removes it).
std::pair<double, double> disk_rate(const fs::path& file, uint64_t bytes) {
  std::vector<char> buf(1 << 20, 'x');
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) bench::die("bench_checkpoint", make_error(ErrorCode::kIo, "cannot create ", file));
  auto t0 = Clock::now();
  for (uint64_t done = 0; done < bytes; done += buf.size()) {
    if (::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size())) {
      bench::die("bench_checkpoint", make_error(ErrorCode::kIo, "write failed: ", file));
    }
  }
  ::fsync(fd);
  const double write_s = seconds_since(t0);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  t0 = Clock::now();
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  const double read_s = seconds_since(t0);
  ::close(fd);
  return {static_cast<double>(bytes) / write_s / 1e9, static_cast<double>(bytes) / read_s / 1e9};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_checkpoint: checkpoint save/load against the disk, and its exposed cost"};
  bool quick = false;
  int64_t layers = 8, channels = 512, batch = 16;
  int repeats = 9;
  std::string dir = ".";
  app.add_flag("--quick", quick, "smaller model, fewer repeats");
  app.add_option("--layers", layers, "L")->capture_default_str();
  app.add_option("--channels", channels, "C")->capture_default_str();
  app.add_option("--batch", batch, "B (sequences of 16 tokens per step: the step's length)")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "repeats (medians)")->capture_default_str();
  app.add_option("--dir", dir, "a directory on the disk to measure (swap files and checkpoints)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    layers = std::min<int64_t>(layers, 4);
    channels = std::min<int64_t>(channels, 256);
    repeats = std::min(repeats, 3);
  }
  const fs::path work = fs::path(dir) / ("bench-checkpoint-" + std::to_string(::getpid()));
  fs::create_directories(work / "swap");

  gpu::DeviceOptions dopt;
  dopt.memory_limit_bytes = size_t{4} << 30;
  auto dev = check(gpu::create_cpu_device(dopt));
  model::GptConfig cfg;
  cfg.vocab = 256;
  cfg.max_seq = 16;
  cfg.layers = layers;
  cfg.channels = channels;
  cfg.heads = 8;
  cfg.dtype = DType::kBF16;
  auto gpt = check(model::GptModel::create(*dev, cfg, model::RunShape{batch, 16, 0}));
  check(gpt->init_params(3));
  // The planned step, half the optimizer state on NVMe (the session's swap store), the masters
  // from the initialisation.
  engine::EngineConfig config;
  config.precision = cfg.dtype;
  config.optimizer.adam.lr = 1e-4f;
  config.optimizer.offload = engine::Home::kNvme;
  config.optimizer.nvme_fraction = 0.5;
  config.storage.nvme_paths = {(work / "swap").string()};
  engine::SessionInputs inputs;
  inputs.init = engine::slices_of([&cfg](int64_t b) { return model::init_block(cfg, b, 3); });
  auto comm = comm::create_local_comm();
  auto session = check(engine::Session::create(config, *dev, *comm, *gpt, inputs));
  engine::TrainStep* step = &session->step();
  engine::OffloadedOptimizer& opt = session->optimizer();
  uint64_t elements = 0;
  for (int64_t n : session->partition_numel()) elements += static_cast<uint64_t>(n);
  std::vector<int32_t> tokens(size_t(batch) * 16), targets(size_t(batch) * 16);
  for (int i = 0; i < int(tokens.size()); ++i) {
    tokens[size_t(i)] = (i * 7) % 256;
    targets[size_t(i)] = (i * 7 + 7) % 256;
  }
  int64_t step_no = 0;
  auto run_step = [&] { check(step->run(tokens.data(), targets.data(), ++step_no, 1).status()); };
  const fs::path root = work / "checkpoints";
  const engine::WriteShared params_file = [&](const std::string& d) {
    return model::write_model_file(
        d + "/params.bin", cfg, DType::kBF16,
        [&](int64_t b, float* host) { return gpt->download_params(b, host); });
  };
  // A save of the state after the last step, started (the update applied first, as train_gpt
  // does); the caller finishes it.
  auto start_save = [&] {
    check(step->flush());
    const engine::CheckpointInfo info{step_no, 1, 0, cfg.describe(), "{}"};
    return check(engine::start_checkpoint(root.string(), 1, *comm, info, opt, step->scaling_state(),
                                          params_file));
  };
  run_step();  // warm-up
  // Save and load, each from an uncached disk, timed from after the update's flush. The disk is
  // measured on both sides of each repeat (before the save and after the load), moving the same
  // bytes: a save writes the checkpoint and reads the NVMe half of the state through the swap
  // store; a load reads the checkpoint and writes that half back. This disk's rate depends on
  // what came just before (docs/benchmarks.md): one measurement per repeat, alternating sides,
  // made the per-repeat ratios alternate with it; bracketing each repeat compares the save and
  // the load with the mean of the disk's times on both sides. The ratios are per repeat, their
  // medians reported. A first, untimed save gives the checkpoint's size.
  const auto nvme_bytes = static_cast<double>(opt.nvme_state_bytes());
  check(start_save()->finish());
  const uint64_t ckpt_bytes = bytes_under(check(engine::find_checkpoint(root.string())));
  const auto ck = static_cast<double>(ckpt_bytes);
  // The disk's time for a save's bytes and for a load's, measured now (from a clean state). Each
  // measurement writes a new file and removes the previous one only afterwards, as a save writes
  // its checkpoint beside the previous one: this disk is thin-provisioned (ext4 mounted with
  // discard), and writing into blocks just freed, which the host still backs, runs at 1.1-1.5
  // GB/s against 0.6 for new ones (docs/benchmarks.md), so a file written where the last one was
  // removed would measure another disk than the save sees.
  fs::path previous;
  int measured = 0;
  auto disk_now = [&](std::vector<double>& w, std::vector<double>& r) {
    drop_cache(work);
    settle();
    const fs::path file = work / ("disk-rate-" + std::to_string(measured++) + ".bin");
    const auto [dw, dr] = disk_rate(file, ckpt_bytes);
    if (!previous.empty()) fs::remove(previous);
    previous = file;
    w.push_back(dw);
    r.push_back(dr);
    return std::pair{(ck / dw + nvme_bytes / dr) / 1e9, (ck / dr + nvme_bytes / dw) / 1e9};
  };
  std::vector<double> save_s, load_s, disk_w_all, disk_r_all, save_ratio, load_ratio;
  for (int r = 0; r < repeats; ++r) {
    const auto before = disk_now(disk_w_all, disk_r_all);
    run_step();
    check(step->flush());
    drop_cache(work);
    settle();
    auto t0 = Clock::now();
    check(start_save()->finish());
    save_s.push_back(seconds_since(t0));
    const std::string latest = check(engine::find_checkpoint(root.string()));
    drop_cache(work);
    settle();
    t0 = Clock::now();
    engine::CheckpointInfo expect{0, 1, 0, cfg.describe(), ""};
    check(engine::verify_checkpoint(latest, 0, expect).status());
    check(engine::load_checkpoint(latest, 0, opt).status());
    load_s.push_back(seconds_since(t0));
    const auto after = disk_now(disk_w_all, disk_r_all);
    save_ratio.push_back((before.first + after.first) / 2 / save_s.back());
    load_ratio.push_back((before.second + after.second) / 2 / load_s.back());
    const size_t n = disk_w_all.size();
    std::printf(
        "repeat %d: disk write %.3f then %.3f GB/s, read %.3f then %.3f GB/s; save %.3f s (%.2f "
        "of disk), load %.3f s (%.2f)\n",
        r, disk_w_all[n - 2], disk_w_all[n - 1], disk_r_all[n - 2], disk_r_all[n - 1],
        save_s.back(), save_ratio.back(), load_s.back(), load_ratio.back());
  }
  // The exposed cost: blocks of steps with a checkpoint after every step, written synchronously
  // or in the background (as train_gpt does: its save finished after the next step), against
  // blocks without; blocks in the order none, sync, background, background, sync, none. A
  // block's first step is not counted (it finishes no save), nor its last save's finish.
  enum Mode { kNone, kSync, kBackground };
  std::vector<double> cycle[3], waits;
  const int block = 4;
  for (int r = 0; r < 2 * repeats; ++r) {
    const auto mode = static_cast<Mode>(r % 6 < 3 ? r % 6 : 5 - r % 6);
    std::unique_ptr<engine::CheckpointSave> pending;
    for (int i = 0; i < block; ++i) {
      const auto t0 = Clock::now();
      run_step();
      if (pending) {
        if (i > 0) waits.push_back(pending->update_wait_seconds());
        check(pending->finish());
        pending.reset();
      }
      if (mode != kNone) pending = start_save();
      if (mode == kSync) {
        check(pending->finish());
        pending.reset();
      }
      if (i > 0) cycle[mode].push_back(seconds_since(t0));
    }
    if (pending) check(pending->finish());
  }
  const double plain = median(cycle[kNone]), sync = median(cycle[kSync]),
               background = median(cycle[kBackground]);
  const double disk_w = median(disk_w_all), disk_r = median(disk_r_all);
  const double save_gbps = static_cast<double>(ckpt_bytes) / median(save_s) / 1e9;
  const double load_gbps = static_cast<double>(ckpt_bytes) / median(load_s) / 1e9;
  // The headline ratios: the disk's median time for the same bytes over the save's (load's)
  // median time, both over the same interleaved repeats. This disk switches between a fast and a
  // slow mode from one second to the next (docs/benchmarks.md), so a ratio of neighbouring
  // measurements (the per-repeat ones, printed as a range) swings more than medians do.
  const double save_over = (ck / disk_w + nvme_bytes / disk_r) / 1e9 / median(save_s);
  const double load_over = (ck / disk_r + nvme_bytes / disk_w) / 1e9 / median(load_s);
  const double exposed = (background - plain) / background;
  const double exposed_sync = (sync - plain) / sync;
  std::printf("GPT L=%lld C=%lld, %lld params, bf16; optimizer state %.1f MB, half on NVMe in %s\n",
              static_cast<long long>(layers), static_cast<long long>(channels),
              static_cast<long long>(cfg.num_params()), 12.0 * double(elements) / 1e6,
              (work / "swap").c_str());
  std::printf("%-26s %10s %10s %10s\n", "", "seconds", "GB/s", "of disk");
  std::printf("%-26s %10.3f %10.3f %10.2f\n", "save (checkpoint bytes)", median(save_s), save_gbps,
              save_over);
  std::printf("%-26s %10.3f %10.3f %10.2f\n", "load (verify + load)", median(load_s), load_gbps,
              load_over);
  auto range = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    char buf[48];
    std::snprintf(buf, sizeof(buf), "%.2f-%.2f", v.front(), v.back());
    return std::string(buf);
  };
  std::printf("%-26s %10s %10s %10s (median %.2f)\n", "  per-repeat ratios", "", "",
              range(save_ratio).c_str(), median(save_ratio));
  std::printf("%-26s %10s %10s %10s (median %.2f, load)\n", "", "", "", range(load_ratio).c_str(),
              median(load_ratio));
  std::printf("%-26s %10s %10.3f\n", "disk write (same bytes)", "", disk_w);
  std::printf("%-26s %10s %10.3f\n", "disk read (same bytes)", "", disk_r);
  std::printf(
      "step %.1f ms (batch %lld); with a checkpoint after every step: written in the background "
      "%.1f ms (of it, updates waiting for the writer %.1f ms), synchronously %.1f ms\n"
      "exposed part of a checkpointed step: %.1f%% in the background, %.1f%% synchronously "
      "(%llu checkpoint bytes)\n",
      1e3 * plain, static_cast<long long>(batch), 1e3 * background, 1e3 * median(waits), 1e3 * sync,
      100.0 * exposed, 100.0 * exposed_sync, static_cast<unsigned long long>(ckpt_bytes));
  fs::remove_all(work);
  nlohmann::json out = {{"bench", "checkpoint"},
                        {"save_gbps", save_gbps},
                        {"load_gbps", load_gbps},
                        {"disk_gbps", disk_w},
                        {"disk_read_gbps", disk_r},
                        {"save_over_disk", save_over},
                        {"load_over_disk", load_over},
                        {"save_over_disk_per_repeat", median(save_ratio)},
                        {"load_over_disk_per_repeat", median(load_ratio)},
                        {"exposed_save_fraction", exposed},
                        {"exposed_save_fraction_sync", exposed_sync},
                        {"step_s", plain},
                        {"checkpointed_step_s", background},
                        {"checkpointed_step_sync_s", sync},
                        {"update_wait_s", median(waits)},
                        {"checkpoint_bytes", ckpt_bytes}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
