// train_gpt --config FILE: a DeepSpeed JSON config read into train_gpt's flags (flags.h) with
// DeepSpeed's meaning. docs/training.md lists every key. A flag given on the command line wins
// over the file.
//
// Keys are of three kinds (ds_config_keys.h):
//   acted on   each sets a flag (or is checked against what strata does);
//   ignored    accepted because it cannot change the results here (a tuning hint, a logging or
//              profiling section, a default written out, a no-op without model parallelism);
//              listed once in the report;
//   refused    strata cannot honour it (the reason is in the message).
// DeepSpeed's aliases are read as their keys. An unknown key inside a section DeepSpeed
// validates (zero_optimization and its offload sections, aio, fp16, bf16, optimizer, scheduler,
// activation_checkpointing) is refused, as DeepSpeed does; an unknown top-level key, which
// DeepSpeed ignores, is a warning. A nearest key is suggested only when it is close.
//
// What a config leaves out takes DeepSpeed's default, not the trainer's (offload none, no
// clipping, a constant rate without a scheduler; a scheduler's own defaults: a log warm-up of
// 1000 steps, ...); tuning knobs (bucket sizes, buffer counts, the aio queue) keep strata's.
// A disabled section (fp16 or bf16 off, an offload device "none") is ignored whole. "auto"
// takes what Hugging Face's DeepSpeed integration fills in for a Trainer with default
// arguments (micro-batch 8, learning rate 5e-5, fp16 and bf16 off, ...), or the flag given on
// the command line. Every value a default or "auto" filled in is in the report.
//
// The batch keys follow DeepSpeed's arithmetic: any two of train_batch_size,
// train_micro_batch_size_per_gpu and gradient_accumulation_steps give the third with the rank
// count; all three must agree.
//
// Every problem of a config is found in one pass and returned together (one line each).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "flags.h"

namespace strata::train_gpt {

// Keys whose meaning needs the model, resolved by resolve_model_keys(); -1: not set.
struct ConfigDeferred {
  int64_t prefetch_bucket_elements = -1;  // zero_optimization.stage3_prefetch_bucket_size
  int64_t number_checkpoints = -1;        // activation_checkpointing.number_checkpoints
  int64_t sub_group_size = -1;            // zero_optimization.sub_group_size
  // "auto" as Hugging Face fills it from the model's hidden size h: reduce_bucket_size h^2,
  // stage3_prefetch_bucket_size 0.9 h^2, stage3_param_persistence_threshold 10 h.
  bool auto_reduce_bucket = false, auto_prefetch_bucket = false, auto_persistence = false;
};

// What reading the config did besides setting flags (rank 0 prints it: print_config_report).
struct ConfigReport {
  std::vector<std::string> filled;    // "key = value (why)": from a default or "auto"
  std::vector<std::string> ignored;   // "key (why)": accepted, cannot change the results here
  std::vector<std::string> aliases;   // "alias read as key"
  std::vector<std::string> warnings;  // unknown top-level keys (DeepSpeed ignores them too)
  std::string content;                // the config as parsed (compared across ranks)
};

// `given(flag)`: whether that flag was on the command line (it then keeps its value); `ranks`:
// the run's rank count (the batch arithmetic). kConfig naming the file and, one line each,
// every refused key and bad value (its path, e.g. zero_optimization.offload_optimizer.ratio, the
// value and what is accepted); kIo when the file cannot be read; kCorrupt for bad JSON.
Status apply_config(const std::string& path, Flags& f, ConfigDeferred& deferred,
                    const std::function<bool(const std::string&)>& given, int ranks,
                    ConfigReport& report);

// The report's lines ("config: ..."), for rank 0 to print once.
std::string describe(const ConfigReport& report);

// What the model's shape decides: --prefetch-depth from the prefetch bucket (the layers whose
// parameters the bucket reaches into, ceil), --checkpoint-interval from number_checkpoints
// (ceil(L / n)), and the "auto" sizes from the hidden size.
void resolve_model_keys(const ConfigDeferred& d, Flags& f, int64_t layers, int64_t layer_numel,
                        int64_t hidden);
// sub_group_size must be at least the largest optimizer partition (strata's sub-groups are the
// blocks).
Status check_rank_keys(const ConfigDeferred& d, const Flags& f, int ranks,
                       int64_t largest_partition);

// The settings in effect, with DeepSpeed's keys (printed once at start).
nlohmann::json effective_config(const Flags& f);

}  // namespace strata::train_gpt
