// train_gpt: trains a small GPT on the synthetic addition task (model/synthetic_task.h) with the
// optimizer state offloaded to host RAM and, for a chosen share, to NVMe. The forward and
// backward run on the Device (a CUDA GPU when there is one, else the CpuDevice). The step is a
// scheduler plan by default (engine/planned_step.h): each block's 16-bit gradient comes to the
// host as soon as backward has produced it, the CPU Adam of that block runs while backward goes
// on (after the global norm when clipping), NVMe state is read ahead and written behind, and the
// new parameters go back up as soon as they are ready. --schedule serial runs the reference step
// (engine/serial_step.h) with the same results, bit for bit. --trace writes a Perfetto timeline.
//
// Data parallelism (engine/zero_step.h): under `mpirun -np N` every rank trains on its share of a
// global batch of N x --batch sequences, with ZeRO stage --zero-stage (0-3) over the ranks;
// rank 0 prints. One rank at stage 0 runs the single-rank planned (or serial) step. Parameters
// are on the device, or at stage 3 sharded in pinned host memory and gathered per layer (no
// parameter offload to NVMe yet). Every flag is checked before memory is touched.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/mpi_comm.h"
#include "core/dtype.h"
#include "cpu/cpu_adam.h"
#include "cpu/pinned_memory.h"
#include "engine/memory_budget.h"
#include "engine/offloaded_optimizer.h"
#include "engine/planned_step.h"
#include "engine/serial_step.h"
#include "engine/zero_step.h"
#include "gpu/device.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/model_file.h"
#include "model/safetensors_export.h"
#include "model/synthetic_task.h"
#include "nvme/swap_store.h"
#include "scheduler/trace.h"

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string device = "auto";
  std::string precision = "bf16";
  std::string loss_scale = "dynamic";
  std::string offload_optimizer = "cpu";
  std::string offload_param;  // empty: cpu at stage 3
  double param_gpu_fraction = 0.0;
  double nvme_fraction = 0.0;
  double gpu_optimizer_fraction = 0.0;
  uint64_t gpu_memory_limit = 0;
  uint64_t host_memory_limit = 0;
  bool delayed_update = false;
  int64_t delayed_update_warmup = 40;
  std::string nvme_path;
  std::string schedule = "planned";
  std::string trace;
  int64_t trace_steps = 2;
  int device_threads = 0, host_threads = 0;
  int zero_stage = 0, prefetch_depth = 2;
  double bucket_mb = 0.0;
  int64_t persistence_threshold = 0;
  std::string comm_backend = "auto";
  int64_t steps = 1000, digits = 2, layers = 2, channels = 64, heads = 4, batch = 32;
  int64_t checkpoint_interval = -1, eval_every = 50;  // -1: 0, or about sqrt(L) when offloaded
  std::string offload_activations = "none";
  std::string init_from, save_model;  // llm.c GPT-2 model files
  std::string export_safetensors;
  std::string metrics;  // JSON Lines
  std::string model_preset;
  int64_t seq_len = 0, vocab = 0;  // 0: the data's
  float lr = 3e-3f, weight_decay = 0.0f, grad_clip = 1.0f;
  double target_accuracy = 0.95;
  uint64_t seed = 1234;
};

int fail(const Status& st) {
  std::fprintf(stderr, "train_gpt: %s\n", st.to_string().c_str());
  return 1;
}

// A tier flag (--offload-optimizer, -param, -activations): none, cpu or nvme; nvme needs
// --nvme-path.
Status check_tier(const char* flag, const std::string& value, const std::string& nvme_path,
                  const char* holds) {
  if (value != "none" && value != "cpu" && value != "nvme") {
    return make_error(ErrorCode::kConfig, flag, " '", value,
                      "' is not accepted (use none, cpu or nvme)");
  }
  if (value == "nvme" && nvme_path.empty()) {
    return make_error(ErrorCode::kConfig, flag,
                      " nvme needs --nvme-path DIR[,DIR...] (a directory on the disk that holds ",
                      holds, ")");
  }
  return ok_status();
}

Status check_flags(const Flags& f) {
  if (f.precision != "bf16" && f.precision != "fp16" && f.precision != "fp32") {
    return make_error(ErrorCode::kConfig, "--precision '", f.precision,
                      "' is not accepted (use bf16, fp16 or fp32)");
  }
  if (f.loss_scale != "dynamic" && f.precision != "fp16") {
    return make_error(ErrorCode::kConfig, "--loss-scale ", f.loss_scale,
                      " needs --precision fp16 (bf16 and fp32 are not loss-scaled)");
  }
  if (f.loss_scale != "dynamic") {
    char* end = nullptr;
    const double v = std::strtod(f.loss_scale.c_str(), &end);
    if (end == f.loss_scale.c_str() || *end != '\0' || !(v > 0.0) || !std::isfinite(v)) {
      return make_error(ErrorCode::kConfig, "--loss-scale '", f.loss_scale,
                        "' is not accepted (use dynamic, or a positive number)");
    }
  }
  STRATA_RETURN_IF_ERROR(
      check_tier("--offload-optimizer", f.offload_optimizer, f.nvme_path, "the optimizer state"));
  if (!f.offload_param.empty()) {  // empty: cpu at stage 3
    STRATA_RETURN_IF_ERROR(
        check_tier("--offload-param", f.offload_param, f.nvme_path, "the parameter shards"));
  }
  STRATA_RETURN_IF_ERROR(check_tier("--offload-activations", f.offload_activations, f.nvme_path,
                                    "the activation checkpoints"));
  if (f.offload_optimizer == "none" && f.schedule != "planned") {
    return make_error(ErrorCode::kConfig,
                      "--offload-optimizer none needs --schedule planned (the serial step "
                      "updates on the host)");
  }
  if (f.delayed_update && f.schedule != "planned") {
    return make_error(ErrorCode::kConfig,
                      "--delayed-update needs --schedule planned (the serial step is the "
                      "reference without it)");
  }
  if (f.gpu_optimizer_fraction > 0.0 && f.offload_optimizer == "none") {
    return make_error(ErrorCode::kConfig, "--gpu-optimizer-fraction ", f.gpu_optimizer_fraction,
                      " needs --offload-optimizer cpu or nvme (none keeps all of the state on "
                      "the device)");
  }
  if (f.gpu_optimizer_fraction > 0.0 && f.schedule != "planned") {
    return make_error(ErrorCode::kConfig, "--gpu-optimizer-fraction ", f.gpu_optimizer_fraction,
                      " needs --schedule planned (the serial step updates on the host)");
  }
  if (f.gpu_optimizer_fraction + f.nvme_fraction > 1.0) {
    return make_error(ErrorCode::kConfig, "--gpu-optimizer-fraction ", f.gpu_optimizer_fraction,
                      " and --optimizer-nvme-fraction ", f.nvme_fraction,
                      " add up to more than 1 (a partition is on the device or on NVMe)");
  }
  if (f.schedule != "planned" && f.schedule != "serial") {
    return make_error(ErrorCode::kConfig, "--schedule '", f.schedule,
                      "' is not accepted (use planned or serial)");
  }
  if (!f.trace.empty() && f.schedule != "planned") {
    return make_error(ErrorCode::kConfig,
                      "--trace needs --schedule planned (the serial step has "
                      "no plan to trace)");
  }
  if (f.comm_backend != "auto" && f.comm_backend != "mpi" && f.comm_backend != "local") {
    return make_error(ErrorCode::kConfig, "--comm-backend '", f.comm_backend,
                      "' is not accepted (use auto, mpi or local: the engine reduces in host "
                      "memory)");
  }
  if (f.zero_stage > 0 && f.schedule != "planned") {
    return make_error(ErrorCode::kConfig, "--zero-stage ", f.zero_stage,
                      " needs --schedule planned (the serial step is the one-rank reference)");
  }
  if ((!f.offload_param.empty() || f.param_gpu_fraction > 0.0) && f.zero_stage != 3) {
    return make_error(ErrorCode::kConfig,
                      !f.offload_param.empty() ? "--offload-param " + f.offload_param
                                               : std::string("--param-gpu-fraction"),
                      " needs --zero-stage 3 (stages 0-2 keep every parameter whole on the "
                      "device; DeepSpeed's offload_param needs stage 3 too)");
  }
  if (f.param_gpu_fraction > 0.0 && f.offload_param == "none") {
    return make_error(ErrorCode::kConfig, "--param-gpu-fraction ", f.param_gpu_fraction,
                      " needs --offload-param cpu or nvme (none keeps every shard on the device)");
  }
  if (f.offload_activations != "none" && f.schedule != "planned") {
    return make_error(ErrorCode::kConfig, "--offload-activations ", f.offload_activations,
                      " needs --schedule planned (the transfers are tasks of the plan)");
  }
  if (f.offload_activations != "none" && f.checkpoint_interval >= 0 &&
      (f.checkpoint_interval == 0 || f.checkpoint_interval >= f.layers)) {
    return make_error(ErrorCode::kConfig, "--offload-activations ", f.offload_activations,
                      " moves nothing with --checkpoint-interval ", f.checkpoint_interval,
                      " and --layers ", f.layers,
                      " (one segment, whose activations stay for its backward): use an interval "
                      "from 1 to ",
                      f.layers - 1, ", or leave it out");
  }
  // Output files: their directory must exist now, not after training.
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"--save-model", f.save_model},
        {"--export-safetensors", f.export_safetensors},
        {"--metrics", f.metrics},
        {"--trace", f.trace}}) {
    if (path.empty()) continue;
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir)) {
      return make_error(ErrorCode::kConfig, flag, " ", path, ": the directory ", dir.string(),
                        " does not exist");
    }
  }
  if (f.offload_optimizer != "nvme" && f.nvme_fraction > 0.0) {
    return make_error(ErrorCode::kConfig, "--optimizer-nvme-fraction ", f.nvme_fraction,
                      " needs --offload-optimizer nvme");
  }
  return ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train_gpt: a small GPT on the synthetic addition task, optimizer offloaded"};
  Flags f;
  app.add_option("--device", f.device, "auto|cpu|cuda")->capture_default_str();
  app.add_option("--precision", f.precision,
                 "bf16|fp16|fp32: parameters, gradients and activations (fp16 scales the loss)")
      ->capture_default_str();
  app.add_option("--loss-scale", f.loss_scale,
                 "fp16: dynamic (DeepSpeed's: from 2^16, doubled after 1000 steps without "
                 "overflow, halved from the 2nd overflow since the last doubling; an "
                 "overflowing step is skipped) or a fixed scale")
      ->capture_default_str();
  app.add_option("--offload-optimizer", f.offload_optimizer,
                 "none|cpu|nvme: where the fp32 masters and Adam moments live (none: on the "
                 "device, updated there)")
      ->capture_default_str();
  app.add_option("--offload-param", f.offload_param,
                 "none|cpu|nvme, stage 3: where this rank's 16-bit parameter shards live between "
                 "uses (none: on the device; cpu: pinned host memory, the default; nvme: the "
                 "swap files, read ahead --prefetch-depth layers before use)");
  app.add_option("--param-gpu-fraction", f.param_gpu_fraction,
                 "with --offload-param cpu|nvme: share of the shards kept on the device anyway "
                 "(the shared block first, then layers in forward order)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--gpu-memory-limit", f.gpu_memory_limit,
                 "SIZE: cap of the device memory pool per rank, e.g. 16GiB (0: the CpuDevice's "
                 "1 GiB, a GPU's free memory less 1 GiB); a model that does not fit is refused "
                 "before training with the bytes requested, in use and the limit")
      ->transform(CLI::AsSizeValue(true))
      ->capture_default_str();
  app.add_option("--host-memory-limit", f.host_memory_limit,
                 "SIZE: pinned host memory this rank's engine may use (optimizer state in RAM, "
                 "its staging, the step plan's buffers), e.g. 8GiB; 0: no limit. A plan over it "
                 "is refused before its large allocations, naming the bytes and the flags that "
                 "would make it fit")
      ->transform(CLI::AsSizeValue(true))
      ->capture_default_str();
  app.add_flag("--delayed-update", f.delayed_update,
               "ZeRO-Offload's one-step delayed parameter update: after the warm-up, the CPU "
               "update of step n runs during step n+1, which uses the parameters from before "
               "it (stages 0-2, optimizer on the host)");
  app.add_option("--delayed-update-warmup", f.delayed_update_warmup,
                 "ordinary steps before the delayed update starts")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--gpu-optimizer-fraction", f.gpu_optimizer_fraction,
                 "share of the optimizer partitions kept and updated on the device (the rest on "
                 "the CPU; DeepSpeed's offload_optimizer.ratio is 1 minus this)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--optimizer-nvme-fraction", f.nvme_fraction,
                 "share of the optimizer state on NVMe (with --offload-optimizer nvme)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--nvme-path", f.nvme_path, "DIR[,DIR...]: where the swap files go");
  app.add_option("--schedule", f.schedule,
                 "planned: the step as a plan with transfers and the CPU Adam overlapping "
                 "compute; serial: one phase after the other (same results)")
      ->capture_default_str();
  app.add_option("--trace", f.trace,
                 "FILE: write a Chrome/Perfetto trace (JSON) of --trace-steps steps after the "
                 "first, and print each traced step's lane metrics");
  app.add_option("--trace-steps", f.trace_steps, "steps in the trace")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--device-threads", f.device_threads,
                 "CpuDevice: threads that run the kernels (0 = all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.add_option("--host-threads", f.host_threads,
                 "threads of the host lane that runs the CPU Adam and the gradient checks "
                 "(0 = all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.add_option("--zero-stage", f.zero_stage,
                 "ZeRO stage over the data-parallel ranks: 0 all replicated, 1 optimizer state "
                 "sharded, 2 gradients too, 3 parameters too (gathered per layer)")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app.add_option("--bucket-mb", f.bucket_mb,
                 "stages 2-3: MiB of gradients waiting on the host for their reduce-scatter "
                 "(DeepSpeed's reduce_bucket_size; 0 = twice the largest layer)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--prefetch-depth", f.prefetch_depth,
                 "stage 3: layers gathered ahead of the one computing")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--param-persistence-threshold", f.persistence_threshold,
                 "stage 3: blocks of fewer elements stay whole on every rank (DeepSpeed's "
                 "stage3_param_persistence_threshold; its default is 100000)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--comm-backend", f.comm_backend,
                 "auto|mpi|local: the communicator (auto: mpi under mpirun, else local)")
      ->capture_default_str();
  app.add_option("--steps", f.steps, "most training steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--digits", f.digits, "digits per operand (1..9)")
      ->check(CLI::Range(1, 9))
      ->capture_default_str();
  app.add_option("--model", f.model_preset,
                 "a preset shape: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b (GPT-2's: maxT 1024, "
                 "V 50257), gpt-7b, gpt-13b (the usual 7B/13B GPT shapes, maxT 2048, V 50257); "
                 "--layers, --heads, --channels, --seq-len and --vocab given beside it win");
  app.add_option("--seq-len", f.seq_len,
                 "maxT, the model's longest context (0: the data's; at least the data's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--vocab", f.vocab, "V (0: the data's; at least the data's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--layers", f.layers, "L")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--channels", f.channels, "C")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--heads", f.heads, "NH (divides C)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--batch", f.batch, "B")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--offload-activations", f.offload_activations,
                 "none|cpu|nvme: where the kept layer inputs of activation checkpointing live "
                 "between forward and backward (all but the last segment's; cpu: pinned host "
                 "memory, nvme: the swap files), brought back one segment ahead")
      ->capture_default_str();
  app.add_option("--init-from", f.init_from,
                 "FILE: start from an llm.c GPT-2 model file (version 3 fp32 or 5 bf16); its "
                 "header's shape replaces --layers, --heads and --channels");
  app.add_option("--save-model", f.save_model,
                 "FILE: write the trained parameters as an llm.c GPT-2 model file at the end "
                 "(fp32 for --precision fp32, else bf16), atomically");
  app.add_option("--export-safetensors", f.export_safetensors,
                 "FILE: write the trained weights at the end as safetensors with Hugging Face "
                 "GPT-2's tensor names and layouts (F32 for --precision fp32, else BF16)");
  app.add_option("--metrics", f.metrics,
                 "FILE: JSON Lines, one object per step (step, loss, norm, lr, ms, tokens_per_s) "
                 "and one per evaluation (step, val_loss, val_accuracy, val_exact_match)");
  app.add_option("--checkpoint-interval", f.checkpoint_interval,
                 "K: keep every K-th layer's input, recompute the rest (0 = keep all; by "
                 "default 0, or about sqrt(L) with --offload-activations)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--lr", f.lr, "Adam learning rate")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay, "AdamW decoupled weight decay")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--grad-clip", f.grad_clip, "clip the global gradient norm to this (0 = off)")
      ->check(CLI::Range(0.0f, 1e6f))
      ->capture_default_str();
  app.add_option("--eval-every", f.eval_every, "steps between held-out evaluations")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("--target-accuracy", f.target_accuracy,
                 "stop when the held-out answer-token accuracy reaches this")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--seed", f.seed, "initialisation and data seed")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, as every other refusal (CLI11's own adds a second one).
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return e.get_exit_code();
  }
  if (Status st = check_flags(f); !st.ok()) return fail(st);

  auto task_r = model::AdditionTask::create(f.digits, 3 * f.digits + 4);
  if (!task_r.ok()) return fail(task_r.status());
  const model::AdditionTask task = task_r.value();
  // --model: a preset shape; the shape flags given beside it win.
  if (!f.model_preset.empty()) {
    struct Preset {
      const char* name;
      int64_t layers, heads, channels, seq;
    };
    const Preset presets[] = {{"gpt2-124m", 12, 12, 768, 1024},  {"gpt2-350m", 24, 16, 1024, 1024},
                              {"gpt2-774m", 36, 20, 1280, 1024}, {"gpt2-1.5b", 48, 25, 1600, 1024},
                              {"gpt-7b", 32, 32, 4096, 2048},    {"gpt-13b", 40, 40, 5120, 2048}};
    const Preset* p = nullptr;
    for (const Preset& q : presets) p = f.model_preset == q.name ? &q : p;
    if (p == nullptr) {
      return fail(make_error(ErrorCode::kConfig, "--model '", f.model_preset,
                             "' is not accepted (gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, "
                             "gpt-7b, gpt-13b)"));
    }
    if (app.count("--layers") == 0) f.layers = p->layers;
    if (app.count("--heads") == 0) f.heads = p->heads;
    if (app.count("--channels") == 0) f.channels = p->channels;
    if (f.seq_len == 0) f.seq_len = p->seq;
    if (f.vocab == 0) f.vocab = 50257;
  }
  if (f.channels % f.heads != 0) {
    return fail(make_error(ErrorCode::kConfig, "--heads ", f.heads, " does not divide --channels ",
                           f.channels, " (use a head count that divides the channel count)"));
  }
  if (f.seq_len != 0 && f.seq_len < task.seq()) {
    return fail(make_error(ErrorCode::kConfig, "--seq-len ", f.seq_len,
                           " is shorter than the data's sequences (", task.seq(),
                           " tokens for synthetic:addition with --digits ", f.digits, ")"));
  }
  if (f.vocab != 0 && f.vocab < model::AdditionTask::kVocab) {
    return fail(make_error(ErrorCode::kConfig, "--vocab ", f.vocab,
                           " is smaller than the data's vocabulary (", model::AdditionTask::kVocab,
                           " tokens for synthetic:addition)"));
  }
  model::GptConfig cfg;
  cfg.vocab = f.vocab != 0 ? f.vocab : model::AdditionTask::kVocab;
  cfg.max_seq = f.seq_len != 0 ? f.seq_len : task.seq();
  cfg.layers = f.layers;
  cfg.heads = f.heads;
  cfg.channels = f.channels;
  cfg.dtype = f.precision == "bf16"   ? DType::kBF16
              : f.precision == "fp16" ? DType::kF16
                                      : DType::kF32;
  // --init-from: the file's shape, its values as every block's initial parameters.
  std::vector<std::vector<float>> initial;
  if (!f.init_from.empty()) {
    auto fc = model::read_model_file_config(f.init_from);
    if (!fc.ok()) return fail(fc.status().with_context("--init-from"));
    if (fc->vocab < model::AdditionTask::kVocab || fc->max_seq < task.seq()) {
      return fail(make_error(ErrorCode::kConfig, "--init-from ", f.init_from, ": its model (",
                             fc->describe(), ") does not fit the data (synthetic:addition: V=",
                             model::AdditionTask::kVocab, ", T=", task.seq(), ")"));
    }
    const DType dt = cfg.dtype;
    cfg = *fc;
    cfg.dtype = dt;
    Status st = model::read_model_file(f.init_from, cfg, [&](int64_t, const float* v) {
      initial.emplace_back(v, v + model::GptModel::block_numel(cfg, int64_t(initial.size())));
      return ok_status();
    });
    if (!st.ok()) return fail(st.with_context("--init-from"));
  }
  // Default interval: keep all without activation offload; about sqrt(L) with it (at least 1,
  // below L so that something moves).
  const int64_t interval = f.checkpoint_interval >= 0 ? f.checkpoint_interval
                           : f.offload_activations == "none"
                               ? 0
                               : std::clamp<int64_t>(std::llround(std::sqrt(double(cfg.layers))), 1,
                                                     std::max<int64_t>(1, cfg.layers - 1));
  if (f.offload_activations != "none" && cfg.layers < 2) {
    return fail(make_error(ErrorCode::kConfig, "--offload-activations ", f.offload_activations,
                           " needs --layers 2 or more (one layer is one segment, kept for its "
                           "backward)"));
  }
  const model::RunShape shape{f.batch, task.seq(), interval};
  if (Status st = cfg.validate(); !st.ok()) return fail(st);
  if (Status st = shape.validate(cfg); !st.ok()) return fail(st);
  std::vector<std::string> nvme_dirs;
  if (!f.nvme_path.empty()) {
    auto dirs = nvme::parse_nvme_paths(f.nvme_path);
    if (!dirs.ok()) return fail(dirs.status());
    for (const auto& d : *dirs) {
      if (!std::filesystem::is_directory(d)) {
        return fail(make_error(ErrorCode::kConfig, "--nvme-path: '", d, "' is not a directory"));
      }
    }
    nvme_dirs = *dirs;
  }

  // The communicator: MPI under mpirun (or with --comm-backend mpi), else one local rank.
  const bool use_mpi =
      f.comm_backend == "mpi" || (f.comm_backend == "auto" && comm::launched_by_mpirun());
  auto comm_r = comm::create_communicator(use_mpi ? comm::Backend::kMpi : comm::Backend::kLocal);
  if (!comm_r.ok()) return fail(comm_r.status());
  comm::Communicator& world = *comm_r.value();
  const int rank = world.rank(), ranks = world.size();
  const bool lead = rank == 0;  // rank 0 prints
  // Past this point every rank must stop together: a failing rank ends the whole job.
  auto die = [&](const Status& st) -> int {
    if (ranks > 1) world.abort(st);
    return fail(st);
  };
  const bool zero = ranks > 1 || f.zero_stage > 0 || f.offload_activations != "none";
  if (zero && f.schedule != "planned") {
    return die(make_error(ErrorCode::kConfig, "--schedule ", f.schedule, " runs one rank; ", ranks,
                          " ranks need --schedule planned"));
  }
  // Ranks on one machine share its cores: each gets its share unless told otherwise.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int share = std::max(1, cores / std::max(1, world.local_size()));

  auto kind = gpu::parse_device_kind(f.device);
  if (!kind.ok()) return die(kind.status().with_context("--device"));
  gpu::DeviceOptions dev_opts;
  dev_opts.threads = f.device_threads > 0 ? f.device_threads : (ranks > 1 ? share : 0);
  dev_opts.memory_limit_bytes = f.gpu_memory_limit;
  // One GPU per rank (CudaDevice); ranks share GPUs round-robin when there are fewer.
  const int gpus = gpu::cuda_device_count();
  dev_opts.ordinal = gpus > 0 ? world.local_rank() % gpus : 0;
  auto dev_r = gpu::create_device(*kind, dev_opts);
  if (!dev_r.ok()) return die(dev_r.status());
  gpu::Device& dev = *dev_r.value();
  // The blocks are split over the ranks (engine/partition.h); the model holds on the device only
  // what the ZeRO stage keeps there (at stage 3: no sharded parameters; from 2: no gradients).
  const int stage = zero ? f.zero_stage : 0;
  auto parts = engine::ZeroStep::partition(cfg, ranks, f.persistence_threshold);
  if (!parts.ok()) return die(parts.status());
  auto model_r = model::GptModel::create(
      dev, cfg, shape,
      engine::ZeroStep::block_storage(*parts, stage, f.offload_activations != "none"));
  if (!model_r.ok() && model_r.status().code() == ErrorCode::kOutOfMemory) {
    return die(model_r.status().with_context(
        "the model does not fit the device (raise --gpu-memory-limit, keep fewer blocks there "
        "with --zero-stage 2 or 3, or fewer activations with --checkpoint-interval, "
        "--offload-activations cpu or a smaller "
        "--batch)"));
  }
  if (!model_r.ok()) return die(model_r.status());
  model::GptModel& gpt = *model_r.value();
  if (Status st = gpt.init_params(f.seed); !st.ok()) return die(st);
  for (size_t b = 0; b < initial.size(); ++b) {  // --init-from's values, where the model holds them
    if (gpt.param_block(int64_t(b)) == nullptr) continue;
    if (Status st = gpt.upload_params(int64_t(b), initial[b].data()); !st.ok()) return die(st);
  }

  // One optimizer partition per parameter block, in backward order (engine/offload_step.h):
  // the whole block, or this rank's shard of it at ZeRO stages 1-3.
  const int64_t nb = gpt.num_blocks();
  const std::vector<int64_t> numel = engine::ZeroStep::optimizer_numel(gpt, *parts, stage);
  std::unique_ptr<nvme::SwapStore> store;
  const bool nvme_acts = f.offload_activations == "nvme";
  if (f.offload_optimizer == "nvme" || f.offload_param == "nvme" || nvme_acts) {
    nvme::SwapStoreOptions so;
    so.dirs = nvme_dirs;
    // This rank's partitions (its shards from stage 1), 12 bytes per element, and its 16-bit
    // parameter shards, plus slack for whole extents.
    uint64_t elements = 0;
    for (int64_t n : numel) elements += static_cast<uint64_t>(n);
    so.capacity_bytes = 12ull * elements + (8ull << 20) * nb;
    if (f.offload_param == "nvme") {
      so.capacity_bytes += dtype_size(cfg.dtype) * elements + (8ull << 20) * nb;
    }
    if (nvme_acts) {  // the checkpoints of every segment but the last
      so.capacity_bytes +=
          static_cast<uint64_t>(gpt.num_segments()) * (gpt.checkpoint_bytes() + (8ull << 20));
    }
    auto s = nvme::SwapStore::open(so);
    if (!s.ok()) return die(s.status());
    store = std::move(s).value();
  }
  cpu::AdamHyper hyper;
  hyper.lr = f.lr;
  hyper.weight_decay = f.weight_decay;
  engine::OffloadedOptimizerOptions oo;
  oo.nvme_fraction = f.offload_optimizer == "nvme" ? f.nvme_fraction : 0.0;
  oo.store = store.get();
  oo.staging_slots = f.schedule == "planned" ? 1 : 3;  // the plan stages through its own buffers
  oo.key_base = static_cast<uint64_t>(rank) << 32;
  if (f.host_memory_limit > 0) {  // the optimizer's share first, before its arena is allocated
    engine::PinnedNeeds pn;
    pn.optimizer_state = engine::OffloadedOptimizer::split(numel, oo.nvme_fraction).host_bytes;
    pn.optimizer_staging =
        engine::OffloadedOptimizer::pinned_bytes_needed(numel, oo) - pn.optimizer_state;
    pn.optimizer_at = [&numel, oo](double fraction) {
      engine::OffloadedOptimizerOptions o = oo;
      o.nvme_fraction = fraction;
      return engine::OffloadedOptimizer::pinned_bytes_needed(numel, o);
    };
    pn.optimizer_fraction = oo.nvme_fraction;
    pn.optimizer_now = pn.optimizer_state + pn.optimizer_staging;
    if (Status st = engine::check_pinned_budget(pn, f.host_memory_limit); !st.ok()) {
      return die(st);
    }
  }
  auto opt_r = engine::OffloadedOptimizer::create(numel, cpu::CpuAdam(hyper), oo);
  if (!opt_r.ok()) return die(opt_r.status());
  engine::OffloadedOptimizer& opt = opt_r.value();

  // The masters start from the initialisation (model/init.h), also of blocks not on the device.
  const auto init = [&](int64_t b, float* host) {
    const std::vector<float> v =
        initial.empty() ? model::init_block(cfg, b, f.seed) : initial[size_t(b)];
    std::copy(v.begin(), v.end(), host);
    return ok_status();
  };
  if (Status st = engine::ZeroStep::load_masters(gpt, opt, *parts, stage, rank, init); !st.ok()) {
    return die(st);
  }
  engine::OffloadStepOptions step_opts;
  step_opts.grad_clip = f.grad_clip;
  if (f.loss_scale != "dynamic") {  // checked by check_flags
    step_opts.loss_scaling.loss_scale = std::strtod(f.loss_scale.c_str(), nullptr);
  }
  std::unique_ptr<engine::SerialStep> serial;
  std::unique_ptr<engine::PlannedStep> planned;
  std::unique_ptr<engine::ZeroStep> zstep;
  const int host_threads =
      f.host_threads > 0 ? f.host_threads : (ranks > 1 ? share : std::max(1, cores));
  if (zero) {
    engine::ZeroStepOptions zo;
    zo.step = step_opts;
    zo.stage = f.zero_stage;
    zo.executor.cpu_threads = host_threads;
    zo.executor.cpu_workers = std::min(2, host_threads);
    zo.executor.trace = true;
    zo.prefetch_depth = f.prefetch_depth;
    zo.persistence_threshold = f.persistence_threshold;
    zo.bucket_bytes = static_cast<uint64_t>(f.bucket_mb * (1 << 20));
    zo.device_optimizer = f.offload_optimizer == "none";
    zo.gpu_optimizer_fraction = f.gpu_optimizer_fraction;
    zo.delayed_update_warmup = f.delayed_update ? f.delayed_update_warmup : -1;
    zo.offload_param = f.offload_param == "none"   ? engine::Home::kDevice
                       : f.offload_param == "nvme" ? engine::Home::kNvme
                                                   : engine::Home::kPinned;
    zo.param_gpu_fraction = f.param_gpu_fraction;
    zo.host_memory_limit = f.host_memory_limit;
    zo.offload_activations = f.offload_activations == "cpu"    ? engine::Home::kPinned
                             : f.offload_activations == "nvme" ? engine::Home::kNvme
                                                               : engine::Home::kDevice;
    zo.swap_store = store.get();
    zo.swap_key_base = (static_cast<uint64_t>(rank) << 32) + (uint64_t{1} << 31);
    auto r = engine::ZeroStep::create(gpt, opt, world, zo);
    if (!r.ok()) return die(r.status());
    zstep = std::move(r).value();
  } else if (f.schedule == "serial") {
    auto r = engine::SerialStep::create(gpt, opt, step_opts);
    if (!r.ok()) return die(r.status());
    serial = std::move(r).value();
  } else {
    engine::PlannedStepOptions po;
    po.step = step_opts;
    po.executor.cpu_threads = host_threads;
    po.executor.trace = true;
    po.device_optimizer = f.offload_optimizer == "none";
    po.gpu_optimizer_fraction = f.gpu_optimizer_fraction;
    po.delayed_update_warmup = f.delayed_update ? f.delayed_update_warmup : -1;
    auto r = engine::PlannedStep::create(gpt, opt, po);
    if (!r.ok()) return die(r.status());
    planned = std::move(r).value();
  }
  sched::TraceWriter trace;
  const sched::Executor* executor = zstep     ? &zstep->executor()
                                    : planned ? &planned->executor()
                                              : nullptr;

  if (lead) {
    std::printf("train_gpt: %s, %lld params, device %s, B=%lld T=%lld K=%lld\n",
                cfg.describe().c_str(), static_cast<long long>(cfg.num_params()),
                dev.name().c_str(), static_cast<long long>(f.batch),
                static_cast<long long>(task.seq()),
                static_cast<long long>(gpt.checkpoint_interval()));
    if (zero) {
      const auto ms = parts->model_state_bytes(f.zero_stage);
      std::printf(
          "zero: stage %d over %d ranks (%s), global batch %lld; per rank: %lld bytes of 16-bit "
          "params, %lld of grads, %lld of fp32 optimizer state (DESIGN.md §1)\n",
          f.zero_stage, ranks, std::string(world.backend()).c_str(),
          static_cast<long long>(f.batch * ranks),
          static_cast<long long>(ms.ok() ? ms->params16 : 0),
          static_cast<long long>(ms.ok() ? ms->grads16 : 0),
          static_cast<long long>(ms.ok() ? ms->optimizer : 0));
    }
    if (f.offload_optimizer == "none") {
      std::printf(
          "optimizer: %llu state bytes on the device, updated there (the host copy only "
          "held the initial state)\n",
          static_cast<unsigned long long>(opt.host_state_bytes()));
    } else {
      std::printf("optimizer: %llu state bytes in host RAM, %llu on NVMe, %llu pinned staging%s\n",
                  static_cast<unsigned long long>(opt.host_state_bytes()),
                  static_cast<unsigned long long>(opt.nvme_state_bytes()),
                  static_cast<unsigned long long>(opt.staging_bytes()),
                  ranks > 1 ? " (rank 0)" : "");
    }
    if (store) std::printf("nvme: %s\n", store->describe().c_str());
    if (zstep) std::printf("memory (rank 0): %s\n", zstep->memory().describe().c_str());
    if (executor != nullptr) {
      const sched::Plan& plan = executor->plan();
      std::printf(
          "schedule: planned, %zu tasks, %llu bytes of pinned host buffers, %llu of device "
          "buffers (the plan's peaks)\n",
          plan.num_tasks(),
          static_cast<unsigned long long>(plan.peak_bytes(sched::Tier::kPinnedHost)),
          static_cast<unsigned long long>(plan.peak_bytes(sched::Tier::kDevice)));
    } else {
      std::printf("schedule: serial\n");
    }
  }

  const int64_t B = f.batch, T = task.seq();
  std::vector<int32_t> tokens(B * T), targets(B * T);
  std::vector<int32_t> global_tokens(B * T * ranks), global_targets(B * T * ranks);
  std::vector<float> logits;
  // --save-model, --export-safetensors: the current parameters (a pending update applied;
  // every rank takes part in the gathers of a sharded model, in the writer's block order, and
  // rank 0 writes). False after an error (printed).
  auto save_model = [&]() -> bool {
    if (f.save_model.empty() && f.export_safetensors.empty()) return true;
    if (planned) {
      if (Status st = planned->flush(); !st.ok()) return die(st) == 0;
    }
    if (zstep) {
      if (Status st = zstep->flush(); !st.ok()) return die(st) == 0;
    }
    auto block = [&](int64_t b, float* host) {
      return zstep ? zstep->gather_params(b, host) : gpt.download_params(b, host);
    };
    const DType stored = cfg.dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
    using Writer = std::function<Status(const model::BlockSource&)>;
    auto save = [&](const std::string& path, const char* flag, bool shared_first,
                    const Writer& write) -> bool {
      if (path.empty()) return true;
      Status st;
      if (lead) {
        st = write(block);
      } else {
        std::vector<float> scratch;
        for (int64_t k = 0; k <= cfg.layers && st.ok(); ++k) {
          const int64_t b = shared_first ? (k == 0 ? cfg.layers : k - 1) : k;
          scratch.resize(static_cast<size_t>(gpt.block_numel(b)));
          st = block(b, scratch.data());
        }
      }
      if (!st.ok()) return die(st.with_context(flag)) == 0;
      if (lead) std::printf("train_gpt: %s %s written\n", flag, path.c_str());
      return true;
    };
    return save(f.save_model, "--save-model", false,
                [&](const model::BlockSource& src) {
                  return model::write_model_file(f.save_model, cfg, stored, src);
                }) &&
           save(f.export_safetensors, "--export-safetensors", true,
                [&](const model::BlockSource& src) {
                  return model::write_safetensors(f.export_safetensors, cfg, stored, src);
                });
  };
  // Held-out accuracy and loss: the mean cross-entropy over the non-ignored targets, on the host
  // from the logits (float64 sums).
  double val_loss = 0.0;
  auto evaluate = [&]() -> Result<model::AdditionTask::Accuracy> {
    model::AdditionTask::Accuracy acc;
    const int kBatches = 8;
    double loss_sum = 0.0;
    int64_t counted = 0;
    for (int i = 0; i < kBatches; ++i) {
      task.make_batch(B, f.seed, /*stream=*/1, i, tokens.data(), targets.data());
      if (zstep) {  // gathers the blocks a stage-3 model does not hold
        STRATA_RETURN_IF_ERROR(zstep->forward_inference(tokens.data()));
      } else {
        STRATA_RETURN_IF_ERROR(gpt.forward(tokens.data(), nullptr).status());
      }
      STRATA_RETURN_IF_ERROR(gpt.logits_to_host(logits));
      const auto a = model::AdditionTask::accuracy(logits, cfg.vocab, targets.data(), B, T);
      acc.token += a.token / kBatches;
      acc.exact_match += a.exact_match / kBatches;
      for (int64_t r = 0; r < B * T; ++r) {
        if (targets[size_t(r)] < 0) continue;
        const float* row = logits.data() + r * cfg.vocab;
        double top = row[0], sum = 0.0;
        for (int64_t v = 1; v < cfg.vocab; ++v) top = std::max(top, double(row[v]));
        for (int64_t v = 0; v < cfg.vocab; ++v) sum += std::exp(double(row[v]) - top);
        loss_sum += top + std::log(sum) - double(row[targets[size_t(r)]]);
        ++counted;
      }
    }
    val_loss = counted > 0 ? loss_sum / double(counted) : 0.0;
    return acc;
  };
  // --metrics: rank 0 writes one JSON object per line, flushed as it goes.
  std::ofstream metrics;
  if (lead && !f.metrics.empty()) {
    metrics.open(f.metrics, std::ios::trunc);
    if (!metrics) {
      return die(make_error(ErrorCode::kIo, "--metrics ", f.metrics, ": cannot create the file"));
    }
  }
  auto metric = [&](const nlohmann::json& j) {
    if (metrics.is_open()) metrics << j.dump() << std::endl;
  };
  // The final summary (rank 0): steps, tokens, time, mean tokens/s, peak memory per tier.
  const auto t_train = Clock::now();
  int64_t steps_done = 0;
  auto summary = [&]() {
    if (!lead) return;
    const double s = std::chrono::duration<double>(Clock::now() - t_train).count();
    const double tokens_done = static_cast<double>(steps_done * B * T * ranks);
    const gpu::MemoryInfo mi = dev.memory_info();
    std::printf(
        "train_gpt: summary: %lld steps, %.0f tokens in %.1f s, %.0f tok/s; peak memory per rank: "
        "device %.1f MiB, pinned host %.1f MiB\n",
        static_cast<long long>(steps_done), tokens_done, s, tokens_done / std::max(s, 1e-9),
        double(mi.peak_bytes) / double(1 << 20),
        double(cpu::default_pinned_pool().peak_bytes()) / double(1 << 20));
  };

  double acc_token = 0.0;
  for (int64_t step = 1; step <= f.steps; ++step) {
    const auto t0 = Clock::now();
    // The global batch of this step; this rank trains on rows [rank*B, (rank+1)*B).
    task.make_batch(B * ranks, f.seed, /*stream=*/0, step, global_tokens.data(),
                    global_targets.data());
    std::copy_n(global_tokens.begin() + rank * B * T, B * T, tokens.begin());
    std::copy_n(global_targets.begin() + rank * B * T, B * T, targets.begin());
    world.reset_stats();  // per-step bytes by collective kind (printed with --trace)
    auto result = zstep     ? zstep->run(tokens.data(), targets.data(), step)
                  : planned ? planned->run(tokens.data(), targets.data(), step)
                            : serial->run(tokens.data(), targets.data(), step);
    if (!result.ok()) return die(result.status());
    const float loss = result->loss;
    const double norm = result->grad_norm;
    if (executor != nullptr && !f.trace.empty() && step >= 2 && step < 2 + f.trace_steps) {
      trace.add_step(executor->plan(), executor->last_trace());
      if (lead) {
        std::printf(
            "trace step %lld: %s\n", static_cast<long long>(step),
            sched::compute_metrics(executor->plan(), executor->last_trace()).describe().c_str());
      }
      if (lead && zstep) {
        const engine::ZeroTraffic& t = zstep->last_traffic();
        std::printf(
            "comm step %lld: sent %llu bytes (grad reduce-scatter %llu, grad all-gather %llu, "
            "param all-gather %llu, statistics %llu; theory %llu)\n",
            static_cast<long long>(step), static_cast<unsigned long long>(t.total()),
            static_cast<unsigned long long>(t.grad_reduce_scatter),
            static_cast<unsigned long long>(t.grad_all_gather),
            static_cast<unsigned long long>(t.param_all_gather),
            static_cast<unsigned long long>(t.stats),
            static_cast<unsigned long long>(zstep->expected_traffic().total()));
        const engine::ZeroLaneBytes lb = zstep->last_lane_bytes();
        std::printf("lanes step %lld: h2d %llu bytes, d2h %llu, nvme read %llu, nvme write %llu\n",
                    static_cast<long long>(step), static_cast<unsigned long long>(lb.h2d),
                    static_cast<unsigned long long>(lb.d2h),
                    static_cast<unsigned long long>(lb.nvme_read),
                    static_cast<unsigned long long>(lb.nvme_write));
        for (size_t k = 0; k < comm::kNumCollectiveKinds; ++k) {
          const auto ck = static_cast<comm::CollectiveKind>(k);
          const comm::CollectiveStats cs = world.stats(ck);
          if (cs.calls == 0) continue;
          std::printf("  %-14s %4llu calls, sent %llu bytes, received %llu bytes\n",
                      std::string(comm::collective_name(ck)).c_str(),
                      static_cast<unsigned long long>(cs.calls),
                      static_cast<unsigned long long>(cs.bytes_sent),
                      static_cast<unsigned long long>(cs.bytes_received));
        }
      }
      if (lead && (step + 1 == 2 + f.trace_steps || step == f.steps)) {
        if (Status st = trace.write(f.trace); !st.ok()) return die(st);
        std::printf("trace: %zu spans written to %s (open in ui.perfetto.dev)\n",
                    trace.num_events(), f.trace.c_str());
      }
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const bool eval = step % f.eval_every == 0 || step == f.steps;
    steps_done = step;
    metric({{"step", step},
            {"loss", loss},
            {"norm", norm},
            {"lr", f.lr},
            {"ms", ms},
            {"tokens_per_s", static_cast<double>(B * T * ranks) / (ms / 1e3)}});
    if (lead && (step == 1 || step % 10 == 0 || eval)) {
      std::printf("step %5lld | loss %.4f | norm %.3f | lr %.2e | %.1f ms | %.0f tok/s",
                  static_cast<long long>(step), loss, norm, f.lr, ms,
                  static_cast<double>(B * T * ranks) / (ms / 1e3));
      if (cfg.dtype == DType::kF16) {
        std::printf(" | scale %g%s", result->loss_scale, result->skipped ? " | skipped" : "");
      }
      std::printf("\n");
    }
    if (eval) {
      // The planned and ZeRO steps apply a step's update in the next one: apply it now (ZeRO
      // stage 3 also gathers the whole parameters into the model). Every rank evaluates the
      // same parameters on the same held-out batches, so every rank stops at the same step.
      if (planned) {
        if (Status st = planned->flush(); !st.ok()) return die(st);
      }
      if (zstep) {
        if (Status st = zstep->flush(); !st.ok()) return die(st);
      }
      auto acc = evaluate();
      if (!acc.ok()) return die(acc.status());
      acc_token = acc->token;
      if (lead) {
        std::printf(
            "eval  %5lld | held-out answer-token accuracy %.3f | exact match %.3f | val loss "
            "%.4f\n",
            static_cast<long long>(step), acc->token, acc->exact_match, val_loss);
      }
      metric({{"step", step},
              {"val_loss", val_loss},
              {"val_accuracy", acc->token},
              {"val_exact_match", acc->exact_match}});
      // Every rank stops on rank 0's figure, so that none goes on alone.
      float reached = acc->token >= f.target_accuracy ? 1.0f : 0.0f;
      if (ranks > 1) {
        if (Status st = world.broadcast(&reached, 1, DType::kF32, 0); !st.ok()) return die(st);
      }
      if (reached > 0.0f) {
        if (lead) {
          std::printf("train_gpt: reached accuracy %.3f >= %.3f at step %lld\n", acc->token,
                      f.target_accuracy, static_cast<long long>(step));
        }
        summary();
        return save_model() ? 0 : 1;
      }
    }
  }
  if (lead) {
    std::printf("train_gpt: %lld steps done, held-out accuracy %.3f (target %.3f not reached)\n",
                static_cast<long long>(f.steps), acc_token, f.target_accuracy);
  }
  summary();
  return save_model() ? 0 : 1;
}
