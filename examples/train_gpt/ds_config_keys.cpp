#include "ds_config_keys.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

namespace strata::train_gpt::ds {

Status Ctx::bad(const json& value, const std::string& accepted) const {
  return make_error(ErrorCode::kConfig, key, " = ", value.dump(), " is not accepted (", accepted,
                    ")");
}

void Ctx::fill(const std::string& key_path, const json& value, const std::string& why) const {
  report.filled.push_back(key_path + " = " + value.dump() + " (" + why + ")");
}

namespace {

// Typed readers: the value, or an error naming the key.
Status read_int(const json& v, Ctx& c, int64_t lo, int64_t hi, int64_t& out) {
  const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  double x = 0.0;
  if (v.is_number_integer()) {
    x = static_cast<double>(v.get<int64_t>());
  } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
    x = v.get<double>();  // 5e8 as DeepSpeed configs often write it
  } else {
    return c.bad(v, range);
  }
  if (x < static_cast<double>(lo) || x > static_cast<double>(hi)) return c.bad(v, range);
  out = static_cast<int64_t>(x);
  return ok_status();
}
Status read_num(const json& v, Ctx& c, double lo, double hi, double& out) {
  if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi) {
    std::ostringstream r;
    r << "a number from " << lo << " to " << hi;
    return c.bad(v, r.str());
  }
  out = v.get<double>();
  return ok_status();
}
Status read_bool(const json& v, Ctx& c, bool& out) {
  if (!v.is_boolean()) return c.bad(v, "true or false");
  out = v.get<bool>();
  return ok_status();
}

// Handlers that set one flag unless it was given on the command line.
template <typename T>
Handler int_flag(const char* flag, T Flags::*field, int64_t lo, int64_t hi) {
  return [=](const json& v, Ctx& c) -> Status {
    int64_t x = 0;
    STRATA_RETURN_IF_ERROR(read_int(v, c, lo, hi, x));
    c.set(flag, field, static_cast<T>(x));
    return ok_status();
  };
}
template <typename T>
Handler num_flag(const char* flag, T Flags::*field, double lo, double hi) {
  return [=](const json& v, Ctx& c) -> Status {
    double x = 0.0;
    STRATA_RETURN_IF_ERROR(read_num(v, c, lo, hi, x));
    c.set(flag, field, static_cast<T>(x));
    return ok_status();
  };
}
Handler tier_flag(const char* flag, std::string Flags::*field) {
  return [=](const json& v, Ctx& c) -> Status {
    if (!v.is_string() || (v != "none" && v != "cpu" && v != "nvme")) {
      return c.bad(v, "\"none\", \"cpu\" or \"nvme\"");
    }
    c.set(flag, field, v.get<std::string>());
    return ok_status();
  };
}
// A key whose only accepted value is what strata does.
Handler fixed(const json& accepted, const char* why) {
  return [=](const json& v, Ctx& c) -> Status {
    if (v != accepted) return c.bad(v, "only " + accepted.dump() + ": " + why);
    return ok_status();
  };
}
Handler nvme_path() {
  return [](const json& v, Ctx& c) -> Status {
    if (!v.is_string() || v.get<std::string>().empty()) return c.bad(v, "a directory");
    const std::string p = v.get<std::string>();
    if (!c.nvme.empty() && p != c.nvme) {
      return c.bad(v, "the same directory as " + c.nvme_key + " (\"" + c.nvme +
                          "\"): strata keeps every swap file in one --nvme-path");
    }
    c.nvme = p;
    c.nvme_key = c.key;
    c.set("--nvme-path", &Flags::nvme_path, p);
    return ok_status();
  };
}
// A scheduler parameter: accepted for the types listed.
Handler sched_param(std::vector<std::string> types, Handler h) {
  return [=](const json& v, Ctx& c) -> Status {
    if (std::find(types.begin(), types.end(), c.sched) == types.end()) {
      std::string list;
      for (const auto& t : types) list += (list.empty() ? "" : ", ") + t;
      return make_error(ErrorCode::kConfig, c.key, " does not apply to scheduler type ",
                        c.sched.empty() ? "(none)" : c.sched, " (it is a parameter of ", list, ")");
    }
    return h(v, c);
  };
}
// DeepSpeed's deprecated booleans for an offload device: true is "cpu", false "none".
Handler offload_bool(const char* flag, std::string Flags::*field) {
  return [=](const json& v, Ctx& c) -> Status {
    bool on = false;
    STRATA_RETURN_IF_ERROR(read_bool(v, c, on));
    c.set(flag, field, on ? "cpu" : "none");
    return ok_status();
  };
}

void add_zero(std::map<std::string, Handler>& t) {
  const std::string z = "zero_optimization.", oo = z + "offload_optimizer.",
                    op = z + "offload_param.";
  t[z + "stage"] = int_flag("--zero-stage", &Flags::zero_stage, 0, 3);
  t[z + "reduce_bucket_size"] = [](const json& v, Ctx& c) {
    return read_int(v, c, 0, int64_t{1} << 50, c.reduce_bucket);
  };
  t[z + "stage3_prefetch_bucket_size"] = [](const json& v, Ctx& c) -> Status {
    int64_t x = 0;
    STRATA_RETURN_IF_ERROR(read_int(v, c, 0, int64_t{1} << 50, x));
    if (!c.given("--prefetch-depth")) c.d.prefetch_bucket_elements = x;
    return ok_status();
  };
  t[z + "stage3_param_persistence_threshold"] =
      int_flag("--param-persistence-threshold", &Flags::persistence_threshold, 0, int64_t{1} << 40);
  t[z + "sub_group_size"] = [](const json& v, Ctx& c) {
    return read_int(v, c, 1, int64_t{1} << 50, c.d.sub_group_size);
  };
  t[z + "cpu_offload"] = offload_bool("--offload-optimizer", &Flags::offload_optimizer);
  t[z + "cpu_offload_param"] = offload_bool("--offload-param", &Flags::offload_param);
  // DeepSpeed's nvme device keeps all of the optimizer state there.
  t[oo + "device"] = [tier = tier_flag("--offload-optimizer", &Flags::offload_optimizer)](
                         const json& v, Ctx& c) -> Status {
    STRATA_RETURN_IF_ERROR(tier(v, c));
    if (v == "nvme") c.set("--optimizer-nvme-fraction", &Flags::nvme_fraction, 1.0);
    return ok_status();
  };
  t[oo + "nvme_path"] = nvme_path();
  t[oo + "ratio"] = [](const json& v, Ctx& c) -> Status {
    double x = 0.0;
    STRATA_RETURN_IF_ERROR(read_num(v, c, 0.0, 1.0, x));
    c.set("--gpu-optimizer-fraction", &Flags::gpu_optimizer_fraction, 1.0 - x);
    return ok_status();
  };
  t[oo + "buffer_count"] = int_flag("--nvme-buffer-count", &Flags::nvme_buffer_count, 1, 64);
  t[op + "device"] = tier_flag("--offload-param", &Flags::offload_param);
  t[op + "nvme_path"] = nvme_path();
  t[op + "buffer_count"] = [](const json& v, Ctx& c) -> Status {
    int64_t x = 0;
    STRATA_RETURN_IF_ERROR(read_int(v, c, 2, 66, x));
    c.set("--prefetch-depth", &Flags::prefetch_depth, static_cast<int>(x - 2));
    return ok_status();
  };
}

void add_precision(std::map<std::string, Handler>& t) {
  // fp16.enabled and bf16.enabled are read before the walk (ds_config.cpp).
  t["fp16.enabled"] = [](const json&, Ctx&) { return ok_status(); };
  t["bf16.enabled"] = [](const json&, Ctx&) { return ok_status(); };
  t["fp16.loss_scale"] = [](const json& v, Ctx& c) -> Status {
    double x = 0.0;
    STRATA_RETURN_IF_ERROR(read_num(v, c, 0.0, 1e38, x));
    std::ostringstream s;
    s << x;
    c.set("--loss-scale", &Flags::loss_scale, x == 0.0 ? "dynamic" : s.str());
    return ok_status();
  };
  t["fp16.initial_scale_power"] =
      int_flag("--initial-scale-power", &Flags::initial_scale_power, 0, 127);
  t["fp16.loss_scale_window"] =
      int_flag("--loss-scale-window", &Flags::loss_scale_window, 1, int64_t{1} << 40);
  t["fp16.hysteresis"] = int_flag("--hysteresis", &Flags::hysteresis, 1, 1 << 20);
  t["fp16.consecutive_hysteresis"] = [](const json& v, Ctx& c) -> Status {
    bool on = false;
    STRATA_RETURN_IF_ERROR(read_bool(v, c, on));
    c.set("--consecutive-hysteresis", &Flags::consecutive_hysteresis, on);
    return ok_status();
  };
  // 0 (no floor, as some configs write it): the smallest scale the scaler accepts.
  t["fp16.min_loss_scale"] = [](const json& v, Ctx& c) -> Status {
    double x = 0.0;
    STRATA_RETURN_IF_ERROR(read_num(v, c, 0.0, 1e38, x));
    c.set("--min-loss-scale", &Flags::min_loss_scale, x == 0.0 ? 1e-30 : x);
    return ok_status();
  };
}

void add_batch_and_optimizer(std::map<std::string, Handler>& t) {
  t["gradient_clipping"] = num_flag("--grad-clip", &Flags::grad_clip, 0.0, 1e6);
  t["train_micro_batch_size_per_gpu"] = [](const json& v, Ctx& c) {
    return read_int(v, c, 1, 1 << 16, c.micro);
  };
  t["train_batch_size"] = [](const json& v, Ctx& c) {
    return read_int(v, c, 1, int64_t{1} << 40, c.global);
  };
  t["gradient_accumulation_steps"] = [](const json& v, Ctx& c) {
    return read_int(v, c, 1, 1024, c.accum);
  };
  t["steps_per_print"] = int_flag("--log-every", &Flags::log_every, 1, int64_t{1} << 40);
  t["optimizer.type"] = [](const json& v, Ctx& c) -> Status {
    const std::string s = optimizer_type(v);
    if (s != "adam" && s != "adamw") {
      return c.bad(v,
                   "\"Adam\" or \"AdamW\": strata's optimizer is Adam, on the CPU or the device");
    }
    return ok_status();
  };
  t["optimizer.params.lr"] = num_flag("--lr", &Flags::lr, 0.0, 1.0);
  t["optimizer.params.betas"] = [](const json& v, Ctx& c) -> Status {
    if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number() ||
        v[0].get<double>() < 0 || v[0].get<double>() >= 1 || v[1].get<double>() < 0 ||
        v[1].get<double>() >= 1) {
      return c.bad(v, "two numbers in [0, 1), e.g. [0.9, 0.999]");
    }
    c.set("--beta1", &Flags::beta1, v[0].get<float>());
    c.set("--beta2", &Flags::beta2, v[1].get<float>());
    return ok_status();
  };
  t["optimizer.params.eps"] = num_flag("--eps", &Flags::eps, 1e-30, 1.0);
  // Hugging Face's rule goes with a config's weight decay: biases and norm weights take none.
  t["optimizer.params.weight_decay"] = [set = num_flag("--weight-decay", &Flags::weight_decay, 0.0,
                                                       1.0)](const json& v, Ctx& c) -> Status {
    STRATA_RETURN_IF_ERROR(set(v, c));
    if (!c.given("--weight-decay-on")) {
      c.f.weight_decay_on = "no-bias-norm";
      c.fill("weight decay on", "no-bias-norm",
             "Hugging Face's Trainer: no biases, no norm weights");
    }
    return ok_status();
  };
  // Applied with the optimizer's type after the walk (ds_config.cpp): DeepSpeed runs type AdamW
  // decoupled whatever adam_w_mode says.
  t["optimizer.params.adam_w_mode"] = [](const json& v, Ctx& c) -> Status {
    bool on = true;
    STRATA_RETURN_IF_ERROR(read_bool(v, c, on));
    c.adam_w_mode = on;
    return ok_status();
  };
  t["optimizer.params.bias_correction"] = [](const json& v, Ctx& c) -> Status {
    bool on = true;
    STRATA_RETURN_IF_ERROR(read_bool(v, c, on));
    c.set("--no-bias-correction", &Flags::no_bias_correction, !on);
    return ok_status();
  };
}

void add_scheduler(std::map<std::string, Handler>& t) {
  t["scheduler.type"] = [](const json& v, Ctx& c) -> Status {
    const std::string s = v.is_string() ? v.get<std::string>() : "";
    const char* kind = s == "WarmupLR"         ? "constant"
                       : s == "WarmupCosineLR" ? "cosine"
                       : s == "WarmupDecayLR"  ? "linear"
                                               : nullptr;
    if (kind == nullptr) return c.bad(v, "\"WarmupLR\", \"WarmupCosineLR\" or \"WarmupDecayLR\"");
    c.set("--lr-schedule", &Flags::lr_schedule, kind);
    return ok_status();
  };
  const std::string sp = "scheduler.params.";
  const std::vector<std::string> all = {"WarmupLR", "WarmupCosineLR", "WarmupDecayLR"},
                                 decays = {"WarmupCosineLR", "WarmupDecayLR"},
                                 max_lr = {"WarmupLR", "WarmupDecayLR"};
  t[sp + "warmup_min_lr"] = sched_param(max_lr, fixed(0, "the warm-up starts from a rate of 0"));
  t[sp + "warmup_max_lr"] = sched_param(max_lr, num_flag("--lr", &Flags::lr, 0.0, 1.0));
  t[sp + "warmup_num_steps"] =
      sched_param(all, int_flag("--warmup", &Flags::warmup, 0, int64_t{1} << 40));
  t[sp + "warmup_type"] = sched_param(all, [](const json& v, Ctx& c) -> Status {
    if (v != "log" && v != "linear") return c.bad(v, "\"log\" or \"linear\"");
    c.set("--warmup-type", &Flags::warmup_type, v.get<std::string>());
    return ok_status();
  });
  t[sp + "total_num_steps"] = sched_param(
      decays, int_flag("--lr-decay-steps", &Flags::lr_decay_steps, 1, int64_t{1} << 40));
  t[sp + "warmup_min_ratio"] =
      sched_param({"WarmupCosineLR"}, fixed(0, "the warm-up starts from a rate of 0"));
  t[sp + "cos_min_ratio"] = sched_param({"WarmupCosineLR"}, [](const json& v, Ctx& c) {
    return read_num(v, c, 0.0, 1.0, c.cos_min_ratio);
  });
  t[sp + "last_batch_iteration"] = sched_param(all, fixed(-1, "the schedule starts at step 1"));
}

void add_other(std::map<std::string, Handler>& t) {
  const std::string ac = "activation_checkpointing.";
  t[ac + "cpu_checkpointing"] = [](const json& v, Ctx& c) -> Status {
    bool on = false;
    STRATA_RETURN_IF_ERROR(read_bool(v, c, on));
    c.set("--offload-activations", &Flags::offload_activations, on ? "cpu" : "none");
    return ok_status();
  };
  t[ac + "number_checkpoints"] = [](const json& v, Ctx& c) -> Status {
    int64_t x = 0;
    STRATA_RETURN_IF_ERROR(read_int(v, c, 1, 1 << 20, x));
    if (!c.given("--checkpoint-interval")) c.d.number_checkpoints = x;
    return ok_status();
  };
  t["aio.block_size"] = [](const json& v, Ctx& c) -> Status {
    int64_t x = 0;
    STRATA_RETURN_IF_ERROR(read_int(v, c, 4096, int64_t{1} << 30, x));
    if (x % 4096 != 0) return c.bad(v, "a multiple of 4096 bytes");
    c.set("--nvme-block-size", &Flags::nvme_block_size, static_cast<uint64_t>(x));
    return ok_status();
  };
  t["aio.queue_depth"] = int_flag("--nvme-queue-depth", &Flags::nvme_queue_depth, 1, 4096);
  t["data_types.grad_accum_dtype"] = [](const json& v, Ctx& c) -> Status {
    if (v != "fp32" && v != "bf16" && v != "fp16")
      return c.bad(v, "\"fp32\", \"bf16\" or \"fp16\"");
    c.set("--grad-accum-dtype", &Flags::grad_accum_dtype, v.get<std::string>());
    return ok_status();
  };
}

bool is_false(const json& v) { return v == false; }
bool is_one(const json& v) { return v.is_number() && v.get<double>() == 1.0; }

}  // namespace

std::string optimizer_type(const json& type) {
  std::string s = type.is_string() ? type.get<std::string>() : "";
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}

const std::map<std::string, Handler>& handlers() {
  static const std::map<std::string, Handler> table = [] {
    std::map<std::string, Handler> t;
    add_zero(t);
    add_precision(t);
    add_batch_and_optimizer(t);
    add_scheduler(t);
    add_other(t);
    return t;
  }();
  return table;
}

const std::map<std::string, Ignored>& ignored_keys() {
  static const std::map<std::string, Ignored> table = [] {
    std::map<std::string, Ignored> t;
    const std::string z = "zero_optimization.", oo = z + "offload_optimizer.",
                      op = z + "offload_param.";
    const std::string hint = "a tuning hint: the plan sizes strata's buffers";
    for (const char* k :
         {"stage3_max_live_parameters", "stage3_max_reuse_distance", "allgather_bucket_size",
          "stage3_model_persistence_threshold", "memory_efficient_linear"}) {
      t[z + k] = {hint, nullptr, ""};
    }
    const std::string always = "what strata always does, whatever the value";
    for (const char* k : {"overlap_comm", "contiguous_gradients", "reduce_scatter",
                          "allgather_partitions", "round_robin_gradients", "load_from_fp32_weights",
                          "elastic_checkpoint", "ignore_unused_parameters"}) {
      t[z + k] = {always, nullptr, ""};
    }
    t[z + "stage3_gather_16bit_weights_on_model_save"] = {
        "--save-model always gathers the whole 16-bit weights", nullptr, ""};
    for (const std::string& s : {oo, op}) {
      t[s + "pin_memory"] = {"strata's host buffers are always pinned", nullptr, ""};
    }
    t[z + "cpu_offload_use_pin_memory"] = {"strata's host buffers are always pinned", nullptr, ""};
    t[oo + "fast_init"] = {always, nullptr, ""};
    for (const char* k : {"pipeline", "pipeline_read", "pipeline_write"}) {
      t[oo + k] = {"a tuning hint: the plan overlaps NVMe with compute", nullptr, ""};
    }
    for (const char* k : {"buffer_size", "max_in_cpu"}) {
      t[op + k] = {"a tuning hint: the plan sizes its buffers", nullptr, ""};
    }
    t["prescale_gradients"] = {"false: DeepSpeed's default", is_false,
                               "only false: strata averages gradients after the reduction"};
    t["gradient_predivide_factor"] = {"1: DeepSpeed's default", is_one,
                                      "only 1: strata averages gradients after the reduction"};
    t["fp16_master_weights_and_grads"] = {
        "false: DeepSpeed's default", is_false,
        "only false: strata keeps fp32 master weights in host memory"};
    for (const char* k : {"wall_clock_breakdown", "memory_breakdown", "dump_state",
                          "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer"}) {
      t[k] = {"logging, or a choice that cannot change the results here", nullptr, ""};
    }
    t["communication_data_type"] = {"null: DeepSpeed's default",
                                    [](const json& v) { return v.is_null(); },
                                    "only null: gradients are reduced in the model's precision"};
    t["seq_parallel_communication_data_type"] = {"a no-op without model parallelism", nullptr, ""};
    t["bf16.auto_cast"] = {"strata's bf16 runs every layer in bf16 already", nullptr, ""};
    t["bf16.immediate_grad_update"] = {always, nullptr, ""};
    t["fp16.auto_cast"] = {"false: DeepSpeed's default", is_false,
                           "only false: strata's fp16 runs every layer in fp16 already"};
    t["fp16.fp16_master_weights_and_grads"] = t["fp16_master_weights_and_grads"];
    // Loss scaling written in a bf16 section (copied from an fp16 one): bf16 is not loss-scaled.
    for (const char* k : {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                          "consecutive_hysteresis", "min_loss_scale"}) {
      t[std::string("bf16.") + k] = {"bf16 is not loss-scaled", nullptr, ""};
    }
    t["optimizer.params.torch_adam"] = {"the same Adam, whichever implementation", nullptr, ""};
    t["optimizer.params.fused"] = {"the same Adam, whichever implementation", nullptr, ""};
    const std::string ac = "activation_checkpointing.";
    for (const char* k : {"partition_activations", "contiguous_memory_optimization",
                          "synchronize_checkpoint_boundary"}) {
      t[ac + k] = {"a no-op without model parallelism", nullptr, ""};
    }
    t[ac + "profile"] = {"a profiler: --trace times every task", nullptr, ""};
    for (const char* k : {"thread_count", "single_submit", "overlap_events", "use_gds"}) {
      t[std::string("aio.") + k] = {"a tuning hint for DeepSpeed's aio library", nullptr, ""};
    }
    return t;
  }();
  return table;
}

const std::map<std::string, std::string>& ignored_sections() {
  static const std::map<std::string, std::string> table = {
      {"flops_profiler", "a profiler: train_gpt prints MFU, --trace times every task"},
      {"tensorboard", "a monitor: --metrics writes JSON lines"},
      {"wandb", "a monitor: --metrics writes JSON lines"},
      {"csv_monitor", "a monitor: --metrics writes JSON lines"},
      {"comet", "a monitor: --metrics writes JSON lines"},
      {"monitor_config", "a monitor: --metrics writes JSON lines"},
      {"comms_logger", "a logger: --trace prints each step's traffic"},
      {"autotuning", "DeepSpeed's autotuner: --auto plans strata's settings"},
  };
  return table;
}

const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> table = {
      {"bfloat16", "bf16"},
      {"zero_optimization.prefetch_bucket_size", "zero_optimization.stage3_prefetch_bucket_size"},
      {"zero_optimization.param_persistence_threshold",
       "zero_optimization.stage3_param_persistence_threshold"},
      {"zero_optimization.model_persistence_threshold",
       "zero_optimization.stage3_model_persistence_threshold"},
      {"zero_optimization.max_live_parameters", "zero_optimization.stage3_max_live_parameters"},
      {"zero_optimization.max_reuse_distance", "zero_optimization.stage3_max_reuse_distance"},
      {"zero_optimization.gather_16bit_weights_on_model_save",
       "zero_optimization.stage3_gather_16bit_weights_on_model_save"},
      {"zero_optimization.stage3_gather_fp16_weights_on_model_save",
       "zero_optimization.stage3_gather_16bit_weights_on_model_save"},
      {"aio.intra_op_parallelism", "aio.thread_count"},
  };
  return table;
}

bool validated_section(const std::string& path) {
  const std::string top = path.substr(0, path.find('.'));
  return top == "zero_optimization" || top == "aio" || top == "fp16" || top == "bf16" ||
         top == "optimizer" || top == "scheduler" || top == "activation_checkpointing";
}

std::optional<AutoValue> hf_auto(const std::string& path, const Flags& f) {
  const std::string hf = "Hugging Face's \"auto\"";
  if (path == "train_micro_batch_size_per_gpu") {
    return AutoValue{8, hf + ": per_device_train_batch_size's default"};
  }
  if (path == "gradient_accumulation_steps") {
    return AutoValue{1, hf + ": gradient_accumulation_steps's default"};
  }
  if (path == "gradient_clipping") return AutoValue{1.0, hf + ": max_grad_norm's default"};
  if (path == "optimizer.params.lr") return AutoValue{5e-5, hf + ": learning_rate's default"};
  if (path == "optimizer.params.betas") {
    return AutoValue{json::array({0.9, 0.999}), hf + ": adam_beta1 and adam_beta2's defaults"};
  }
  if (path == "optimizer.params.eps") return AutoValue{1e-8, hf + ": adam_epsilon's default"};
  if (path == "optimizer.params.weight_decay") {
    return AutoValue{0.0, hf + ": weight_decay's default"};
  }
  if (path == "scheduler.params.warmup_min_lr") return AutoValue{0, hf};
  if (path == "scheduler.params.warmup_num_steps") {
    return AutoValue{0, hf + ": warmup_steps's default"};
  }
  if (path == "scheduler.params.warmup_max_lr") {
    return AutoValue{f.lr, hf + ": the learning rate"};
  }
  if (path == "scheduler.params.total_num_steps") {
    return AutoValue{f.steps, hf + ": the run's steps (--steps)"};
  }
  return std::nullopt;
}

bool is_object_path(const std::string& path) {
  auto prefix_of = [&path](const std::string& k) {
    return k.size() > path.size() && k.compare(0, path.size(), path) == 0 && k[path.size()] == '.';
  };
  for (const auto& [k, h] : handlers()) {
    if (prefix_of(k)) return true;
  }
  for (const auto& [k, i] : ignored_keys()) {
    if (prefix_of(k)) return true;
  }
  return false;
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string close_key(const std::string& path) {
  auto last = [](const std::string& k) { return k.substr(k.rfind('.') + 1); };
  const std::string name = last(path);
  // Close: at most 2 edits, or a quarter of the name, in the last name (a typo), or the same
  // last name in another section (a key put in the wrong place).
  const size_t limit = std::max<size_t>(2, name.size() / 4);
  std::string best;
  size_t best_d = limit + 1;
  auto consider = [&](const std::string& k) {
    const size_t d = std::min(edit_distance(name, last(k)), edit_distance(path, k));
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  };
  for (const auto& [k, h] : handlers()) consider(k);
  for (const auto& [k, i] : ignored_keys()) consider(k);
  for (const auto& [k, a] : aliases()) consider(a);
  for (const auto& [k, s] : ignored_sections()) consider(k);
  for (const char* k : {"zero_optimization", "zero_optimization.offload_optimizer",
                        "zero_optimization.offload_param", "activation_checkpointing",
                        "optimizer.params", "scheduler.params"}) {
    consider(k);
  }
  return best == path ? std::string() : best;
}

}  // namespace strata::train_gpt::ds
