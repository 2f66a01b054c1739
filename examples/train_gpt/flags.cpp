#include "flags.h"

#include "config_fields.h"
#include "cpu/rank_placement.h"
#include "lr_schedule.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

namespace strata::train_gpt {

namespace {
// Sizes are not negative (CLI11 would wrap "-5" into an unsigned value). A transform, so that it
// runs before AsSizeValue (transforms run last added, first).
// Nor past 2^63 bytes (8 EiB), where CLI11's conversion would saturate silently.
CLI::Validator non_negative_size() {
  return CLI::Validator(
      [](std::string& v) {
        const std::string refused =
            "'" + v + "' is not accepted (a size in bytes below 8EiB, e.g. 8GiB, 512MiB, 0)";
        if (!v.empty() && v[0] == '-') return refused;
        char* end = nullptr;
        const long double n = std::strtold(v.c_str(), &end);
        long double scale = 1;
        if (end != nullptr && *end != '\0') {
          const char* units = "kmgtpe";
          const char* u = std::strchr(units, std::tolower(static_cast<unsigned char>(*end)));
          if (u != nullptr) scale = std::pow(1024.0L, static_cast<long double>(u - units + 1));
        }
        return !(n * scale < std::ldexp(1.0L, 63)) ? refused : std::string();
      },
      "");
}

// A tier flag (--offload-optimizer, -param, -activations): none, cpu or nvme.
Status check_tier(const char* flag, const std::string& value) {
  if (value != "none" && value != "cpu" && value != "nvme") {
    return make_error(ErrorCode::kConfig, flag, " '", value,
                      "' is not accepted (use none, cpu or nvme)");
  }
  return ok_status();
}
}  // namespace

LrSchedule schedule_of(const Flags& f) {
  LrSchedule s;
  s.lr = f.lr;
  s.min_lr = f.lr_min;
  s.warmup = f.warmup;
  s.steps = f.lr_decay_steps > 0 ? f.lr_decay_steps : f.steps;
  s.decay_given = f.lr_decay_steps > 0;
  s.kind = f.lr_schedule;
  s.warmup_kind = f.warmup_type;
  return s;
}

Status check_flags(const Flags& f) {
  // The strings first, then the engine's settings (EngineConfig::validate, its messages naming
  // the flags), then what only the trainer has.
  if (f.precision != "bf16" && f.precision != "fp16" && f.precision != "fp32") {
    return make_error(ErrorCode::kConfig, "--precision '", f.precision,
                      "' is not accepted (use bf16, fp16 or fp32)");
  }
  // Flags that would be silently without effect.
  if (f.resume_override && f.resume.empty()) {
    return make_error(ErrorCode::kConfig,
                      "--resume-override lets the flags differ from a resumed run's, and no "
                      "--resume is given (give --resume DIR, or leave it out)");
  }
  if (f.microbatch_order == "layer" && f.grad_accum == 1) {
    return make_error(ErrorCode::kConfig,
                      "--microbatch-order layer orders a step's micro-batches, and --grad-accum "
                      "1 makes one (give --grad-accum 2 or more, or leave the order out)");
  }
  if (f.grad_accum_dtype != "fp32" && f.grad_accum_dtype != "bf16" &&
      f.grad_accum_dtype != "fp16") {
    return make_error(ErrorCode::kConfig, "--grad-accum-dtype '", f.grad_accum_dtype,
                      "' is not accepted (use fp32, bf16 or fp16)");
  }
  if (f.weight_decay_on != "all" && f.weight_decay_on != "matrices" &&
      f.weight_decay_on != "no-bias-norm") {
    return make_error(ErrorCode::kConfig, "--weight-decay-on '", f.weight_decay_on,
                      "' is not accepted (use all, matrices or no-bias-norm)");
  }
  if (f.adam_mode != "adamw" && f.adam_mode != "adam") {
    return make_error(ErrorCode::kConfig, "--adam-mode '", f.adam_mode,
                      "' is not accepted (use adamw or adam)");
  }
  if (f.loss_scale != "dynamic") {
    char* end = nullptr;
    const double v = std::strtod(f.loss_scale.c_str(), &end);
    if (end == f.loss_scale.c_str() || *end != '\0' || !(v > 0.0) || !std::isfinite(v)) {
      return make_error(ErrorCode::kConfig, "--loss-scale '", f.loss_scale,
                        "' is not accepted (use dynamic, or a positive number)");
    }
  }
  STRATA_RETURN_IF_ERROR(cpu::parse_bind_mode(f.bind).status());
  STRATA_RETURN_IF_ERROR(check_tier("--offload-optimizer", f.offload_optimizer));
  if (!f.offload_param.empty()) {  // empty: cpu at stage 3
    STRATA_RETURN_IF_ERROR(check_tier("--offload-param", f.offload_param));
  }
  STRATA_RETURN_IF_ERROR(check_tier("--offload-activations", f.offload_activations));
  if (f.schedule != "planned" && f.schedule != "serial") {
    return make_error(ErrorCode::kConfig, "--schedule '", f.schedule,
                      "' is not accepted (use planned or serial)");
  }
  STRATA_ASSIGN_OR_RETURN(const engine::EngineConfig config, engine_config(f));
  STRATA_RETURN_IF_ERROR(with_flag_names(config.validate()));
  if (f.checkpoint_every > 0 && f.checkpoint_dir.empty()) {
    return make_error(ErrorCode::kConfig, "--checkpoint-every ", f.checkpoint_every,
                      " needs --checkpoint-dir DIR");
  }
  if (f.checkpoint_every > 0 && f.delayed_update) {
    return make_error(
        ErrorCode::kConfig, "--checkpoint-every ", f.checkpoint_every,
        " does not go with --delayed-update yet (its stale parameters are not saved)");
  }
  if (!f.checkpoint_dir.empty() && std::filesystem::exists(f.checkpoint_dir) &&
      !std::filesystem::is_directory(f.checkpoint_dir)) {
    return make_error(ErrorCode::kConfig, "--checkpoint-dir ", f.checkpoint_dir,
                      " is not a directory");
  }
  if (!f.resume.empty() && !f.init_from.empty()) {
    return make_error(ErrorCode::kConfig, "--resume and --init-from ", f.init_from,
                      " both set the parameters (give one)");
  }
  if (f.plan && f.schedule != "planned") {
    return make_error(ErrorCode::kConfig,
                      "--plan needs --schedule planned (the serial step has no plan to show)");
  }
  if (!f.trace.empty() && f.schedule != "planned") {
    return make_error(ErrorCode::kConfig,
                      "--trace needs --schedule planned (the serial step has "
                      "no plan to trace)");
  }
  if (f.comm_backend != "auto" && f.comm_backend != "mpi" && f.comm_backend != "local") {
    return make_error(ErrorCode::kConfig, "--comm-backend '", f.comm_backend,
                      "' is not accepted (use auto, mpi or local: the step's host communicator; "
                      "NCCL comes beside it with --comm nccl)");
  }
  if (f.comm != "auto" && f.comm != "nccl" && f.comm != "mpi") {
    return make_error(ErrorCode::kConfig, "--comm '", f.comm,
                      "' is not accepted (use auto, nccl or mpi)");
  }
  STRATA_RETURN_IF_ERROR(check_schedule(schedule_of(f)));
  if (f.data_order != "sequential" && f.data_order != "shuffled") {
    return make_error(ErrorCode::kConfig, "--data-order '", f.data_order,
                      "' is not accepted (use sequential or shuffled)");
  }
  if (!f.val_data.empty() && f.data.rfind("synthetic:", 0) == 0) {
    return make_error(ErrorCode::kConfig, "--val-data ", f.val_data, " needs token --data (",
                      f.data, " validates on its own held-out examples)");
  }
  return ok_status();
}

void add_flags(CLI::App& app, Flags& f) {
  // A flag given twice takes its last value (a command line can be extended to override).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
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
      ->transform(non_negative_size())
      ->capture_default_str();
  app.add_option("--host-memory-limit", f.host_memory_limit,
                 "SIZE: pinned host memory this rank's engine may use (optimizer state in RAM, "
                 "its staging, the step plan's buffers), e.g. 8GiB; 0: no limit. A plan over it "
                 "is refused before its large allocations, naming the bytes and the flags that "
                 "would make it fit")
      ->transform(CLI::AsSizeValue(true))
      ->transform(non_negative_size())
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
                 "first, and print each traced step's lane metrics; under mpirun every rank's "
                 "steps, a process per rank, in the one file rank 0 writes");
  app.add_flag("--plan", f.plan,
               "print the memory plan per tier (device, pinned host, pageable host, NVMe), the "
               "bytes per step on each lane and the predicted step time, then exit (nothing "
               "large is allocated)");
  app.add_flag("--calibrate", f.calibrate,
               "measure this machine's rates for the step-time prediction again (compute, "
               "link, disk, CPU Adam); the cache keeps each rate's last five measurements and "
               "the prediction uses their median");
  app.add_flag("--auto", f.auto_plan,
               "stage 3: choose --offload-param, --param-gpu-fraction, --gpu-optimizer-fraction, "
               "--optimizer-nvme-fraction, --offload-activations, --checkpoint-interval and "
               "--prefetch-depth that fit --gpu-memory-limit, --host-memory-limit and the NVMe "
               "free space with the lowest predicted step time (printing the choice, the "
               "runner-up and why); they replace those flags");
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
  app.add_option("--bind", f.bind,
                 "where each rank runs: cores (bound to its share of the cores of its GPU's NUMA "
                 "node, memory on that node), numa (bound to the whole node), none, or auto "
                 "(cores unless there are more ranks than cores on this machine)")
      ->capture_default_str();
  app.add_option("--device-ids", f.device_ids,
                 "GPU ordinals the local ranks take in turn, e.g. 0,2 (default: chosen by their "
                 "NUMA node, one per rank)")
      ->delimiter(',');
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
  app.add_option("--comm", f.comm,
                 "auto|nccl|mpi: where the ZeRO step's collectives run: mpi on pinned host memory "
                 "(whole blocks cross PCIe), nccl on the GPUs (only each rank's shard crosses; "
                 "--device cuda); auto: under mpirun the planner prices both and takes the "
                 "faster, else mpi")
      ->capture_default_str();
  app.add_option("--steps", f.steps, "the step to train to (0: none, e.g. to export a checkpoint)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--digits", f.digits, "digits per operand (1..9)")
      ->check(CLI::Range(1, 9))
      ->capture_default_str();
  app.add_option("--model", f.model_preset,
                 "a preset shape: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b (GPT-2's: maxT 1024, "
                 "V 50257), gpt-7b, gpt-13b (the usual 7B/13B GPT shapes, maxT 2048, V 50257), "
                 "or a Llama: llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, llama-3.1-70b, "
                 "llama-2-7b, llama-2-13b (the published config.json shapes); --layers, --heads, "
                 "--kv-heads, --channels, --intermediate, --seq-len and --vocab given beside it "
                 "win");
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
  app.add_option("--kv-heads", f.kv_heads,
                 "Llama: NKV, the key/value heads of grouped-query attention (divides NH; 0: the "
                 "preset's, or NH)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--intermediate", f.intermediate,
                 "Llama: I, the SwiGLU MLP's width (0: the preset's, or 4C)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--batch", f.batch, "B")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--offload-activations", f.offload_activations,
                 "none|cpu|nvme: where the kept layer inputs of activation checkpointing live "
                 "between forward and backward (all but the last segment's; cpu: pinned host "
                 "memory, nvme: the swap files), brought back one segment ahead")
      ->capture_default_str();
  app.add_option("--init-from", f.init_from,
                 "FILE|DIR: start from an llm.c GPT-2 model file (version 3 fp32 or 5 bf16), or "
                 "from a Hugging Face Llama checkpoint directory (config.json and "
                 "model.safetensors or its shards with model.safetensors.index.json; F32, BF16 "
                 "or F16); its shape replaces the shape flags");
  app.add_option("--save-model", f.save_model,
                 "FILE|DIR: write the trained parameters at the end: GPT, an llm.c GPT-2 model "
                 "file; Llama, a Hugging Face checkpoint directory (config.json, "
                 "model.safetensors or 5 GB shards with their index); fp32 for --precision fp32, "
                 "else bf16; each file atomically");
  app.add_option("--export-safetensors", f.export_safetensors,
                 "FILE|DIR: write the trained weights at the end as safetensors with Hugging "
                 "Face's tensor names and layouts: GPT-2's in one FILE, Llama's as a checkpoint "
                 "directory as --save-model writes it (F32 for --precision fp32, else BF16)");
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
  app.add_option("--weight-decay", f.weight_decay,
                 "weight decay (decoupled with --adam-mode adamw, L2 with adam)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  app.add_option("--beta1", f.beta1, "Adam beta1")
      ->check(CLI::Range(0.0f, 0.999999f))
      ->capture_default_str();
  app.add_option("--beta2", f.beta2, "Adam beta2")
      ->check(CLI::Range(0.0f, 0.999999f))
      ->capture_default_str();
  app.add_option("--eps", f.eps, "Adam epsilon")
      ->check(CLI::Range(1e-30f, 1.0f))
      ->capture_default_str();
  app.add_option("--adam-mode", f.adam_mode,
                 "adamw (the weight decay decoupled: p -= lr*wd*p) or adam (the decay added to "
                 "the gradient as L2: DeepSpeed's adam_w_mode false)")
      ->capture_default_str();
  app.add_option(
         "--grad-accum-dtype", f.grad_accum_dtype,
         "fp32|bf16|fp16: stages 2-3 with --grad-accum > 1, the type in which the host adds "
         "up the micro-batches' gradient shards (fp32, or the precision's own 16-bit type)")
      ->capture_default_str();
  app.add_option("--weight-decay-on", f.weight_decay_on,
                 "all (every parameter: llm.c's CPU trainer), matrices (the 2-D weights: llm.c's "
                 "GPU trainer, train_gpt2.py) or no-bias-norm (all but biases and LayerNorm "
                 "weights: Hugging Face's Trainer)")
      ->capture_default_str();
  app.add_flag("--no-bias-correction", f.no_bias_correction,
               "Adam without bias correction of its moments (DeepSpeed's bias_correction false)");
  app.add_option("--lr-schedule", f.lr_schedule,
                 "constant|cosine|linear: after the warm-up, --lr held, or decayed to --lr-min "
                 "at the last step (cosine, or linear)")
      ->capture_default_str();
  app.add_option("--warmup", f.warmup, "steps of learning-rate warm-up from 0 to --lr")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--warmup-type", f.warmup_type,
                 "linear|log: the warm-up's shape (lr*s/W, llm.c's; or lr*ln(s)/ln(W), DeepSpeed "
                 "WarmupLR's default)")
      ->capture_default_str();
  app.add_option("--lr-min", f.lr_min, "the floor of the cosine or linear decay")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  app.add_option("--data", f.data,
                 "synthetic:addition[:DIGITS] (the built-in task), or an llm.c token file or a "
                 "glob of shards in quotes, e.g. 'data/fineweb_train_*.bin'")
      ->capture_default_str();
  app.add_option("--val-data", f.val_data,
                 "token file or glob for the validation loss (read in order from its start at "
                 "every validation; with token --data)");
  app.add_option("--val-batches", f.val_batches,
                 "batches per validation (0: 8 for the synthetic task, 20 for token data)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--data-order", f.data_order,
                 "sequential|shuffled: token data in llm.c's unshuffled order (consecutive "
                 "windows of B*T+1 tokens advancing by B*T, shard after shard; llm.c itself "
                 "shuffles by default), or T+1-token windows of every shard in a permutation "
                 "drawn per epoch from --seed (strata's own)")
      ->capture_default_str();
  app.add_option("--grad-accum", f.grad_accum,
                 "micro-batches of --batch per step whose gradients add up before one update "
                 "(DeepSpeed's gradient_accumulation_steps)")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  app.add_option("--microbatch-order", f.microbatch_order,
                 "auto|micro|layer: with --grad-accum K > 1, run each micro-batch through the "
                 "whole model in turn (micro), or every micro-batch through a checkpoint segment "
                 "before the next segment (layer: at stage 3 each layer is gathered once per "
                 "pass instead of K times; the same results bit for bit; the checkpoints of "
                 "every micro-batch stay on the device); auto: the planner's choice, layer where "
                 "it is possible, fits and is predicted faster")
      ->check(CLI::IsMember({"auto", "micro", "layer"}))
      ->capture_default_str();
  app.add_flag("--device-grad-sum", f.device_grad_sum,
               "stages 2-3 with --microbatch-order layer: add a layer's gradients of the "
               "micro-batches on the device and reduce the sum once per step (gradient traffic "
               "once per step, not --grad-accum times; the results of stages 0-1 bit for bit "
               "instead of those of --microbatch-order micro at the same stage)");
  app.add_option("--lr-decay-steps", f.lr_decay_steps,
                 "steps over which cosine/linear decay to --lr-min, then held (0: --steps)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--log-every", f.log_every, "steps between step lines (and the first and last)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--initial-scale-power", f.initial_scale_power,
                 "fp16 dynamic loss scale: the first scale is 2^this")
      ->check(CLI::Range(0, 127))
      ->capture_default_str();
  app.add_option("--loss-scale-window", f.loss_scale_window,
                 "fp16 dynamic loss scale: steps without overflow before the scale doubles")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--hysteresis", f.hysteresis,
                 "fp16 dynamic loss scale: overflows tolerated before the scale is halved")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_flag("--consecutive-hysteresis", f.consecutive_hysteresis,
               "fp16: refill the hysteresis after every step without overflow");
  app.add_option("--min-loss-scale", f.min_loss_scale, "fp16: the scale never goes below this")
      ->check(CLI::Range(1e-30, 1e38))
      ->capture_default_str();
  app.add_option("--nvme-block-size", f.nvme_block_size,
                 "SIZE: bytes per NVMe request (a multiple of 4 KiB; DeepSpeed's aio.block_size)")
      ->transform(CLI::AsSizeValue(true))
      ->transform(non_negative_size())
      ->capture_default_str();
  app.add_option("--nvme-queue-depth", f.nvme_queue_depth,
                 "NVMe requests in flight per swap store (DeepSpeed's aio.queue_depth)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--nvme-buffer-count", f.nvme_buffer_count,
                 "pinned staging buffers of the optimizer state read from / written to NVMe "
                 "(DeepSpeed's offload_optimizer.buffer_count)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--checkpoint-dir", f.checkpoint_dir,
                 "DIR: where --checkpoint-every writes checkpoints (step_N directories: every "
                 "rank's optimizer state, NVMe partitions included, the 16-bit parameters, the "
                 "loss scaler and data position, a manifest with checksums; crash-safe)");
  app.add_option("--checkpoint-every", f.checkpoint_every, "steps between checkpoints (0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--keep-checkpoints", f.keep_checkpoints,
                 "complete checkpoints kept (older ones removed once a new one is done; 0: all)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--resume", f.resume,
                 "[DIR]: continue from the newest complete checkpoint in DIR (or DIR itself; "
                 "without DIR: --checkpoint-dir), bit for bit; --steps counts from the start")
      ->expected(0, 1);
  app.add_flag("--resume-override", f.resume_override,
               "let --seed, --batch, --grad-accum, --seq-len, --data, --val-data, --data-order "
               "differ from the checkpoint's (each said; when --data, --batch, --grad-accum, "
               "--seq-len or --data-order differ the data starts over); the model's shape never "
               "does");
  app.add_option("--config", f.config,
                 "FILE: a DeepSpeed JSON config; flags given beside it win (docs/training.md "
                 "lists each key with its flag)");
  app.add_option("--peak-flops", f.peak_flops,
                 "FLOP/s of one rank's device for the MFU column (0: its matmul rate, measured "
                 "at start)")
      ->check(CLI::Range(0.0, 1e18))
      ->capture_default_str();
  app.add_option("--grad-clip", f.grad_clip, "clip the global gradient norm to this (0 = off)")
      ->check(CLI::Range(0.0f, 1e6f))
      ->capture_default_str();
  app.add_option("--val-every,--eval-every", f.val_every,
                 "steps between validations (held-out loss; the synthetic task's accuracy)")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("--target-accuracy", f.target_accuracy,
                 "stop when the held-out answer-token accuracy reaches this")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--seed", f.seed, "initialisation and data seed")->capture_default_str();
}

}  // namespace strata::train_gpt
