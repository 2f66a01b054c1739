// train_gpt's flags: their values (Flags), their CLI11 definitions with help and defaults
// (add_flags), and the checks of their combinations, run before any memory is touched
// (check_flags: one-line errors naming the flag, the value and what is accepted).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "lr_schedule.h"

namespace strata::train_gpt {

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
  std::string microbatch_order = "auto";  // --microbatch-order
  bool device_grad_sum = false;
  int64_t delayed_update_warmup = 40;
  std::string nvme_path;
  std::string schedule = "planned";
  std::string trace;
  int64_t trace_steps = 2;
  int device_threads = 0, host_threads = 0;
  std::string bind = "auto";    // --bind: auto|none|cores|numa (cpu/rank_placement.h)
  std::vector<int> device_ids;  // --device-ids: the GPUs of the local ranks; empty: by locality
  int zero_stage = 0, prefetch_depth = 2;
  double bucket_mb = 0.0;
  int64_t persistence_threshold = 0;
  std::string comm_backend = "auto";
  std::string comm = "auto";  // where the ZeRO step's collectives run: auto|nccl|mpi
  int64_t steps = 1000, digits = 2, layers = 2, channels = 64, heads = 4, batch = 32;
  int64_t checkpoint_interval = -1, val_every = 50;  // -1: 0, or about sqrt(L) when offloaded
  std::string offload_activations = "none";
  std::string init_from, save_model;  // llm.c GPT-2 model files
  std::string export_safetensors;
  std::string metrics;  // JSON Lines
  std::string model_preset;
  int64_t seq_len = 0, vocab = 0;          // 0: the data's
  int64_t kv_heads = 0, intermediate = 0;  // Llama's NKV and I (0: the preset's or NH, 4C)
  float lr = 3e-3f, weight_decay = 0.0f, grad_clip = 1.0f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  std::string adam_mode = "adamw";  // adamw: decoupled decay; adam: the decay as L2 (DeepSpeed's
                                    // adam_w_mode false)
  bool no_bias_correction = false;
  std::string weight_decay_on = "all";    // all | matrices | no-bias-norm
  std::string grad_accum_dtype = "fp32";  // fp32 | bf16 | fp16 (stages 2-3)
  // --config: each flag the DeepSpeed config set (its value or its default), with the key that
  // set it (messages name both: config_fields.h).
  std::map<std::string, std::string> config_keys;
  int64_t warmup = 0;
  std::string lr_schedule = "constant", warmup_type = "linear";
  float lr_min = 0.0f;
  std::string data = "synthetic:addition", val_data;
  std::string data_order = "sequential";
  int64_t val_batches = 0;     // 0: 8 for the synthetic task, 20 for token data (llm.c's)
  double peak_flops = 0.0;     // per rank; 0: the device's measured matmul rate
  int64_t lr_decay_steps = 0;  // 0: --steps
  int64_t grad_accum = 1;      // micro-batches per step
  int64_t log_every = 10;
  // fp16 dynamic loss scaling (DeepSpeed's fp16 section; engine/loss_scaler.h)
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  // NVMe I/O (DeepSpeed's aio section and offload buffer_count)
  uint64_t nvme_block_size = 1 << 20;
  int nvme_queue_depth = 32;
  int nvme_buffer_count = 3;
  std::string config;  // a DeepSpeed JSON config (ds_config.h)
  // Checkpoints (engine/checkpoint.h)
  std::string checkpoint_dir, resume;
  bool resume_override = false;  // the run flags may differ from the checkpoint's
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 2;
  // The planner (planner/plan_report.h, planner/calibration.h)
  bool plan = false;       // print the plan and the predicted step time, then exit
  bool calibrate = false;  // measure this machine's rates again (else the cached ones)
  bool auto_plan = false;  // --auto: choose the stage-3 settings (auto_plan.h)
  double target_accuracy = 0.95;
  uint64_t seed = 1234;
};

// Defines every flag on `app`, writing into `f`.
void add_flags(CLI::App& app, Flags& f);
// The learning-rate schedule the flags describe.
LrSchedule schedule_of(const Flags& f);
// The flags' combinations (ranges are CLI11's); kConfig naming the flag.
Status check_flags(const Flags& f);

}  // namespace strata::train_gpt
