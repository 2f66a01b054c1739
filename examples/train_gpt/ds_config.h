// train_gpt --config FILE: a DeepSpeed JSON config read into train_gpt's flags (flags.h). Each
// DeepSpeed key we act on sets one flag (docs/training.md lists them side by side); a flag given
// on the command line wins over the file. Unlike DeepSpeed, which ignores keys it does not know,
// an unknown key is an error naming it and the nearest known key, and a DeepSpeed key strata
// does not act on is refused with the reason (a setting silently lost is worse than a refusal).
// "auto" (as the Hugging Face integration writes it) leaves the flag as it is.
//
// Keys whose meaning needs the model or the rank count (stage3_prefetch_bucket_size,
// number_checkpoints, train_batch_size, sub_group_size) are kept in ConfigDeferred and resolved
// by resolve_deferred() once those are known.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "flags.h"

namespace strata::train_gpt {

struct ConfigDeferred {
  int64_t prefetch_bucket_elements = -1;  // zero_optimization.stage3_prefetch_bucket_size
  int64_t number_checkpoints = -1;        // activation_checkpointing.number_checkpoints
  int64_t train_batch_size = -1;          // train_batch_size
  int64_t sub_group_size = -1;            // zero_optimization.sub_group_size
};

// `given(flag)`: whether that flag was on the command line (it then keeps its value). kConfig
// naming the file and the key (its path, e.g. zero_optimization.offload_optimizer.ratio), the
// value and what is accepted; kIo when the file cannot be read; kCorrupt for bad JSON.
Status apply_config(const std::string& path, Flags& f, ConfigDeferred& deferred,
                    const std::function<bool(const std::string&)>& given);

// What the model's shape decides: --prefetch-depth from the prefetch bucket (the layers whose
// parameters fit it) and --checkpoint-interval from number_checkpoints (ceil(L / n)).
void resolve_model_keys(const ConfigDeferred& d, Flags& f, int64_t layers, int64_t layer_numel);
// What the ranks decide: train_batch_size must be micro-batch x accumulation x ranks, and
// sub_group_size at least the largest optimizer partition (strata's sub-groups are the blocks).
Status check_rank_keys(const ConfigDeferred& d, const Flags& f, int ranks,
                       int64_t largest_partition);

// The settings in effect, with DeepSpeed's keys (printed once at start).
nlohmann::json effective_config(const Flags& f);

}  // namespace strata::train_gpt
