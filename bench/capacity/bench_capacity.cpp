// bench_capacity: ZeRO-Infinity's promise at the scale of this machine: a model whose training
// state (16 bytes per parameter: 16-bit parameters and gradients, fp32 master, m and v) is
// --ram-ratio times the host's RAM (default 1.3) trains on one rank of the CpuDevice, with every
// tier that can be on NVMe there: ZeRO stage 3, the parameter shards (--offload-param nvme), all
// of the optimizer state (--offload-optimizer nvme, fraction 1) and the activation checkpoints
// (--offload-activations nvme), under --nvme-path. --model gpt: GPT-2's layer of C = --channels
// (default 2048); --model llama: Llama 3.2 1B's layer shape at C (head size 64, a key/value head
// per 4 query heads, intermediate size 4C, untied head). L is chosen for the ratio. It prints the
// plan's memory by kind, then each step's loss, time and bytes per lane, and checks: the
// process's peak resident memory stays below the RAM (so the model was never held), the swap
// files hold the state, and the loss on the step's batch (the same one every step) falls.
// --quick: a model of 1/20 of the RAM (a smoke run of the same path).
// Prints a table, then one JSON line.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "comm/local_comm.h"
#include "engine/session.h"
#include "gpu/cpu_device.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/llama.h"
#include "model/synthetic_task.h"
#include "nvme/swap_store.h"

using namespace strata;
using bench::Clock;
using bench::seconds_since;

namespace {

STRATA_BENCH_CHECKS("bench_capacity")

uint64_t mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

uint64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

double gib(uint64_t b) { return static_cast<double>(b) / double(uint64_t{1} << 30); }

// The family's model at the bench's size: its shape, blocks, construction and initial values.
struct Family {
  std::string describe;
  int64_t params = 0;
  std::vector<int64_t> numels;
  int64_t layers = 0;
  std::function<Result<std::unique_ptr<model::Model>>(gpu::Device&, const model::RunShape&,
                                                      const model::BlockStorage&)>
      make;
  std::function<std::vector<float>(int64_t block)> init;
};

// Layers for `ratio` x `ram` of training state: (state / 16 - shared) / layer, at least 2.
int64_t layers_for(double ratio, uint64_t ram, double layer, double shared) {
  return std::max<int64_t>(
      2, static_cast<int64_t>(std::ceil((ratio * double(ram) / 16.0 - shared) / layer)));
}

Family make_family(const std::string& name, const model::AdditionTask& task, int64_t channels,
                   double ratio, uint64_t ram) {
  Family f;
  if (name == "gpt") {
    model::GptConfig cfg;
    cfg.vocab = model::AdditionTask::kVocab;
    cfg.max_seq = task.seq();
    cfg.channels = channels;
    cfg.heads = channels / 128;
    cfg.dtype = DType::kBF16;
    cfg.layers = 1;
    cfg.layers = layers_for(ratio, ram, double(model::GptModel::block_numel(cfg, 0)),
                            double(model::GptModel::block_numel(cfg, 1)));
    check(cfg.validate());
    f.describe = "GPT " + cfg.describe();
    f.params = cfg.num_params();
    f.layers = cfg.layers;
    f.numels = model::GptModel::block_numels(cfg);
    f.make = [cfg](gpu::Device& dev, const model::RunShape& shape,
                   const model::BlockStorage& storage) -> Result<std::unique_ptr<model::Model>> {
      STRATA_ASSIGN_OR_RETURN(auto m, model::GptModel::create(dev, cfg, shape, storage));
      return std::unique_ptr<model::Model>(std::move(m));
    };
    f.init = [cfg](int64_t b) { return model::init_block(cfg, b, 11); };
    return f;
  }
  model::LlamaConfig cfg;
  cfg.vocab = model::AdditionTask::kVocab;
  cfg.max_seq = task.seq();
  cfg.channels = channels;
  cfg.heads = channels / 64;
  cfg.kv_heads = std::max<int64_t>(1, cfg.heads / 4);
  cfg.intermediate = 4 * channels;
  cfg.dtype = DType::kBF16;
  cfg.layers = 1;
  cfg.layers = layers_for(ratio, ram, double(cfg.layer_params()), double(cfg.shared_params()));
  check(cfg.validate());
  f.describe = cfg.describe();
  f.params = cfg.num_params();
  f.layers = cfg.layers;
  f.numels = model::LlamaModel::block_numels(cfg);
  f.make = [cfg](gpu::Device& dev, const model::RunShape& shape,
                 const model::BlockStorage& storage) -> Result<std::unique_ptr<model::Model>> {
    STRATA_ASSIGN_OR_RETURN(auto m, model::LlamaModel::create(dev, cfg, shape, storage));
    return std::unique_ptr<model::Model>(std::move(m));
  };
  f.init = [cfg](int64_t b) { return model::init_llama_block(cfg, b, 11); };
  return f;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_capacity: a model larger than host RAM, trained with ZeRO-Infinity's tiers"};
  bool quick = false;
  double ratio = 1.3;
  int64_t channels = 2048, steps = 3;
  std::string nvme_path = ".", family = "gpt";
  app.add_flag("--quick", quick, "a model of 1/20 of the RAM instead");
  app.add_option("--ram-ratio", ratio, "training state over host RAM")
      ->check(CLI::Range(0.001, 100.0))
      ->capture_default_str();
  app.add_option("--channels", channels, "C (the layer count follows)")
      ->check(CLI::Range(64, 16384))
      ->capture_default_str();
  app.add_option("--steps", steps, "training steps")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  app.add_option("--model", family, "gpt (GPT-2's layer) or llama (Llama 3.2 1B's layer shape)")
      ->check(CLI::IsMember({"gpt", "llama"}))
      ->capture_default_str();
  app.add_option("--nvme-path", nvme_path, "directory for the swap files")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (quick) ratio = 0.05;
  const auto t_start = Clock::now();
  const uint64_t ram = mem_total_bytes();
  if (ram == 0) check(make_error(ErrorCode::kIo, "/proc/meminfo: no MemTotal"));

  auto task = check(model::AdditionTask::create(2, 10));
  const Family fam = make_family(family, task, channels, ratio, ram);
  const int64_t psi = fam.params;
  const uint64_t state = 16 * static_cast<uint64_t>(psi);
  const int64_t k = std::max<int64_t>(1, std::llround(std::sqrt(double(fam.layers))));
  const model::RunShape shape{1, task.seq(), k};
  std::printf("host RAM %.1f GiB; %s: %lld params, training state %.1f GiB = %.2fx RAM\n", gib(ram),
              fam.describe.c_str(), static_cast<long long>(psi), gib(state),
              double(state) / double(ram));

  // Stage 3 on one rank: the model holds no parameter or gradient block and no checkpoint but
  // the last segment's; the device (host RAM here) holds the working set only.
  auto comm = comm::create_local_comm();
  gpu::DeviceOptions dopt;
  dopt.memory_limit_bytes = size_t{4} << 30;
  auto dev = check(gpu::create_cpu_device(dopt));
  const std::string dir = nvme_path + "/strata-bench-capacity";
  std::filesystem::create_directories(dir);
  // Stage 3, the fp32 state, the 16-bit shards and the checkpoints on NVMe (the session's swap
  // store, sized by its capacity formula).
  engine::EngineConfig config;
  config.zero.stage = 3;
  config.precision = DType::kBF16;
  config.optimizer.grad_clip = 1.0f;
  config.optimizer.adam.lr = 1e-6f;  // small: Adam's first steps move every weight by about lr
  config.optimizer.offload = engine::Home::kNvme;
  config.optimizer.nvme_fraction = 1.0;
  config.zero.offload_param = engine::Home::kNvme;
  config.zero.offload_activations = engine::Home::kNvme;
  config.storage.nvme_paths = {dir};
  auto layout = check(engine::Session::prepare(config, fam.numels, 1));
  auto net = check(fam.make(*dev, shape, layout.storage));
  engine::SessionInputs inputs;
  inputs.init = engine::slices_of(fam.init);
  auto t0 = Clock::now();
  auto session = check(engine::Session::create(config, *dev, *comm, *net, inputs));
  engine::ZeroStep* step = session->zero();
  nvme::SwapStore* store = session->store();
  std::printf("swap: %s, %.1f GiB reserved\n", dir.c_str(), gib(store->capacity_bytes()));
  const double init_s = seconds_since(t0);
  const engine::ZeroMemory mem = step->memory();
  std::printf("set-up %.1f s (state initialised and written to the swap files)\nmemory: %s\n",
              init_s, mem.describe().c_str());

  std::printf("%5s %9s %9s %10s %10s %10s %10s\n", "step", "loss", "seconds", "h2d MB", "d2h MB",
              "nvme rd GB", "nvme wr GB");
  std::vector<int32_t> tokens(static_cast<size_t>(shape.batch * shape.seq)), targets(tokens.size());
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> losses, secs;
  for (int64_t s = 1; s <= steps; ++s) {
    task.make_batch(shape.batch, 11, 0, 1, tokens.data(), targets.data());
    t0 = Clock::now();
    const auto r = check(step->run(tokens.data(), targets.data(), s));
    secs.push_back(seconds_since(t0));
    losses.push_back(r.loss);
    const engine::ZeroLaneBytes lb = step->last_lane_bytes();
    std::printf("%5lld %9.4f %9.1f %10.1f %10.1f %10.2f %10.2f\n", static_cast<long long>(s),
                r.loss, secs.back(), double(lb.h2d) * 1e-6, double(lb.d2h) * 1e-6,
                double(lb.nvme_read) * 1e-9, double(lb.nvme_write) * 1e-9);
    std::fflush(stdout);
    rows.push_back({{"step", s},
                    {"loss", r.loss},
                    {"seconds", secs.back()},
                    {"nvme_read_bytes", lb.nvme_read},
                    {"nvme_write_bytes", lb.nvme_write}});
  }
  const sched::StepMetrics m =
      sched::compute_metrics(step->executor()->plan(), step->executor()->last_trace());
  std::printf("last step: %s\n", m.describe().c_str());
  const uint64_t rss = peak_rss_bytes(), disk = store->used_bytes();
  const bool fits = rss < ram, learned = losses.back() < losses.front();
  std::printf(
      "peak resident memory %.1f GiB (%.2fx RAM: %s); swap files hold %.1f GiB; loss %.4f -> "
      "%.4f (%s); %.1f s in all\n",
      gib(rss), double(rss) / double(ram), fits ? "the model was never in RAM" : "OVER THE RAM",
      gib(disk), losses.front(), losses.back(), learned ? "falls" : "DOES NOT FALL",
      seconds_since(t_start));
  nlohmann::json out{{"bench", "capacity"},
                     {"model", family},
                     {"params", psi},
                     {"layers", fam.layers},
                     {"channels", channels},
                     {"host_ram_bytes", ram},
                     {"training_state_bytes", state},
                     {"state_over_ram", double(state) / double(ram)},
                     {"peak_rss_bytes", rss},
                     {"peak_rss_over_ram", double(rss) / double(ram)},
                     {"swap_bytes", disk},
                     {"setup_s", init_s},
                     {"step_s", secs},
                     {"losses", losses},
                     {"exposed_fraction", m.exposed_transfer_ms / m.step_ms},
                     {"total_s", seconds_since(t_start)},
                     {"steps", rows}};
  session.reset();
  std::filesystem::remove_all(dir);
  std::printf("%s\n", out.dump().c_str());
  return fits && learned ? 0 : 1;
}
