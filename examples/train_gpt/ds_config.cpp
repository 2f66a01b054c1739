#include "ds_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "ds_config_keys.h"
#include "model/json_input.h"

namespace strata::train_gpt {
namespace {

using json = nlohmann::json;
using ds::Ctx;

const std::string kDsDefault = "DeepSpeed's default";

// Every problem of the walk, one line each.
// A config's problems and warnings are listed up to this many, then counted.
constexpr size_t kListed = 20;

struct Problems {
  std::vector<std::string> lines;
  void add(const Status& st) {
    if (!st.ok()) lines.push_back(st.message());
  }
};

// The offload section at `path` is disabled: a device of "none", or none given (DeepSpeed's
// default), and the flag not given otherwise.
bool offload_disabled(const json& section) {
  return !section.is_object() || !section.contains("device") || section["device"] == "none";
}

// "auto" sizes Hugging Face derives from the model's hidden size h (resolve_model_keys).
bool model_auto(const std::string& path, Ctx& c) {
  const std::string z = "zero_optimization.";
  const char* why = "Hugging Face's \"auto\", from the hidden size h";
  if (path == z + "reduce_bucket_size") {
    c.d.auto_reduce_bucket = !c.given("--bucket-mb");
    c.fill(path, "h*h", why);
  } else if (path == z + "stage3_prefetch_bucket_size") {
    c.d.auto_prefetch_bucket = !c.given("--prefetch-depth");
    c.fill(path, "0.9*h*h", why);
  } else if (path == z + "stage3_param_persistence_threshold") {
    c.d.auto_persistence = !c.given("--param-persistence-threshold");
    c.fill(path, "10*h", why);
  } else {
    return false;
  }
  return true;
}

void walk(const json& obj, const std::string& prefix, Ctx& c, Problems& p) {
  for (const auto& [name, value] : obj.items()) {
    std::string path = prefix.empty() ? name : prefix + "." + name;
    if (const auto a = ds::aliases().find(path); a != ds::aliases().end()) {
      c.report.aliases.push_back(path + " read as " + a->second);
      path = a->second;
    }
    c.key = path;
    if (const auto s = ds::ignored_sections().find(path); s != ds::ignored_sections().end()) {
      c.report.ignored.push_back(path + " (" + s->second + ")");
      continue;
    }
    if (const auto h = ds::handlers().find(path); h != ds::handlers().end()) {
      if (value == "auto" && model_auto(path, c)) continue;
      if (value == "auto" && path == "train_batch_size") {  // derived from the other two
        c.fill(path, "micro-batch x accumulation x ranks", "Hugging Face's \"auto\"");
        continue;
      }
      if (value == "auto") {
        const auto v = ds::hf_auto(path, c.f);
        if (!v) {
          p.add(c.bad(value,
                      "Hugging Face fills in \"auto\" only for the keys docs/training.md "
                      "lists; give a value"));
          continue;
        }
        c.fill(path, v->value, v->why);
        p.add(h->second(v->value, c));
        continue;
      }
      p.add(h->second(value, c));
      continue;
    }
    if (const auto i = ds::ignored_keys().find(path); i != ds::ignored_keys().end()) {
      if (i->second.harmless && !i->second.harmless(value) && value != "auto") {
        p.add(c.bad(value, i->second.refusal));
      } else {
        c.report.ignored.push_back(path + " (" + i->second.why + ")");
      }
      continue;
    }
    if (ds::is_object_path(path)) {
      if (!value.is_object()) {
        p.add(c.bad(value, "an object of keys"));
        continue;
      }
      // A disabled section is ignored whole: fp16 or bf16 off, an offload device of "none".
      const bool precision_off = (path == "fp16" && c.f.precision != "fp16") ||
                                 (path == "bf16" && c.f.precision != "bf16");
      const bool offload_off = (path == "zero_optimization.offload_optimizer" ||
                                path == "zero_optimization.offload_param") &&
                               offload_disabled(value);
      if (precision_off) {
        if (value.size() > 1 || !value.contains("enabled")) {
          c.report.ignored.push_back(path + " (disabled: its keys are not read)");
        }
        continue;
      }
      if (offload_off) {
        if (value.contains("device"))
          p.add(ds::handlers().at(path + ".device")(value["device"], c));
        if (value.size() > (value.contains("device") ? 1u : 0u)) {
          c.report.ignored.push_back(path + " (device none: its other keys are not read)");
        }
        continue;
      }
      walk(value, path, c, p);
      continue;
    }
    const std::string near = ds::close_key(path);
    const std::string hint = near.empty() ? "" : " (did you mean " + near + "?)";
    if (prefix.empty() && !ds::validated_section(path)) {
      c.report.warnings.push_back("unknown top-level key " + path + hint +
                                  ": ignored, as DeepSpeed ignores it");
      continue;
    }
    p.add(make_error(ErrorCode::kConfig, "unknown key ", path, hint,
                     ": DeepSpeed refuses unknown keys in this section; docs/training.md lists "
                     "the keys strata reads"));
  }
}

// fp16.enabled / bf16.enabled (bfloat16: the alias): true, false, "auto" or absent (false).
Result<bool> section_enabled(const json& j, const char* name, const char* alias, Ctx& c,
                             bool flag_says) {
  const char* key = j.contains(name) ? name : j.contains(alias) ? alias : nullptr;
  if (key == nullptr || !j[key].is_object() || !j[key].contains("enabled")) return false;
  const json& v = j[key]["enabled"];
  c.key = std::string(name) + ".enabled";
  if (v == "auto") {
    // Hugging Face: the Trainer's --fp16/--bf16; here --precision when given, else off.
    const bool on = c.given("--precision") && flag_says;
    c.fill(c.key, on,
           c.given("--precision") ? "\"auto\": --precision"
                                  : "Hugging Face's \"auto\": off by default");
    return on;
  }
  if (!v.is_boolean()) return c.bad(v, "true, false or \"auto\"");
  return v.get<bool>();
}

// What the config leaves out takes DeepSpeed's default (unless the flag is given).
void apply_defaults(const json& j, Ctx& c) {
  const json zero = j.value("zero_optimization", json::object());
  auto has = [](const json& o, const char* k) { return o.is_object() && o.contains(k); };
  const bool old_optimizer = has(zero, "cpu_offload");
  const json oo = zero.is_object() ? zero.value("offload_optimizer", json::object()) : json();
  if (!has(oo, "device") && !old_optimizer && !c.given("--offload-optimizer")) {
    c.f.offload_optimizer = "none";
    c.f.config_keys["--offload-optimizer"] = "zero_optimization.offload_optimizer.device";
    c.fill("zero_optimization.offload_optimizer.device", "none", kDsDefault);
  }
  const json op = zero.is_object() ? zero.value("offload_param", json::object()) : json();
  if (c.f.zero_stage == 3 && !has(op, "device") && !has(zero, "cpu_offload_param") &&
      !c.given("--offload-param")) {
    c.f.offload_param = "none";
    c.f.config_keys["--offload-param"] = "zero_optimization.offload_param.device";
    c.fill("zero_optimization.offload_param.device", "none", kDsDefault);
  }
  if (!j.contains("gradient_clipping") && !c.given("--grad-clip")) {
    c.f.grad_clip = 0.0f;
    c.f.config_keys["--grad-clip"] = "gradient_clipping";
    c.fill("gradient_clipping", 0.0, kDsDefault + ": no clipping");
  }
  if (j.contains("optimizer") && j["optimizer"].is_object()) {
    const json params = j["optimizer"].value("params", json::object());
    auto fill = [&](const char* key, const char* flag, auto Flags::*field, double v) {
      if (has(params, key) || c.given(flag)) return;
      c.f.*field = static_cast<std::remove_reference_t<decltype(c.f.*field)>>(v);
      c.fill(std::string("optimizer.params.") + key, v, kDsDefault);
    };
    fill("lr", "--lr", &Flags::lr, 1e-3);
    fill("eps", "--eps", &Flags::eps, 1e-8);
    fill("weight_decay", "--weight-decay", &Flags::weight_decay, 0.0);
    if (!has(params, "betas") && !c.given("--beta1") && !c.given("--beta2")) {
      c.f.beta1 = 0.9f;
      c.f.beta2 = 0.999f;
      c.fill("optimizer.params.betas", json::array({0.9, 0.999}), kDsDefault);
    }
  }
  if (!j.contains("scheduler")) {
    if (!c.given("--lr-schedule") && !c.given("--warmup")) {
      c.f.lr_schedule = "constant";
      c.f.warmup = 0;
      c.fill("scheduler", "none", kDsDefault + ": a constant learning rate");
    }
    return;
  }
  const json params =
      j["scheduler"].is_object() ? j["scheduler"].value("params", json::object()) : json::object();
  if (!has(params, "warmup_num_steps") && !c.given("--warmup")) {
    c.f.warmup = 1000;
    c.fill("scheduler.params.warmup_num_steps", 1000, kDsDefault);
  }
  if (!has(params, "warmup_type") && !c.given("--warmup-type")) {
    c.f.warmup_type = "log";
    c.fill("scheduler.params.warmup_type", "log", kDsDefault);
  }
  if ((c.sched == "WarmupLR" || c.sched == "WarmupDecayLR") && !has(params, "warmup_max_lr") &&
      !c.given("--lr")) {
    c.f.lr = 1e-3f;
    c.fill("scheduler.params.warmup_max_lr", 1e-3, kDsDefault);
  }
  if ((c.sched == "WarmupCosineLR" || c.sched == "WarmupDecayLR") &&
      !has(params, "total_num_steps") && !c.given("--lr-decay-steps")) {
    c.fill("scheduler.params.total_num_steps", c.f.steps,
           "the run's --steps: DeepSpeed requires the key, Hugging Face fills it so");
  }
  if (c.sched == "WarmupCosineLR" && !has(params, "cos_min_ratio") && c.cos_min_ratio < 0.0) {
    c.cos_min_ratio = 1e-4;
    c.fill("scheduler.params.cos_min_ratio", 1e-4, kDsDefault);
  }
}

// DeepSpeed's batch arithmetic: train_batch_size = micro-batch x accumulation x ranks; any two
// give the third.
Status resolve_batch(Ctx& c, int ranks) {
  const bool micro_given = c.micro > 0 || c.given("--batch");
  const bool accum_given = c.accum > 0 || c.given("--grad-accum");
  int64_t micro = c.given("--batch") ? c.f.batch : c.micro > 0 ? c.micro : c.f.batch;
  int64_t accum = c.given("--grad-accum") ? c.f.grad_accum : c.accum > 0 ? c.accum : c.f.grad_accum;
  const int64_t r = ranks;
  if (c.global > 0) {
    c.key = "train_batch_size";
    if (micro_given && accum_given) {
      if (c.global != micro * accum * r) {
        return make_error(ErrorCode::kConfig, "train_batch_size = ", c.global,
                          " is not train_micro_batch_size_per_gpu (", micro,
                          ") x gradient_accumulation_steps (", accum, ") x ranks (", r,
                          ") = ", micro * accum * r, " (DeepSpeed requires them to agree)");
      }
    } else if (micro_given || !accum_given) {
      if (!micro_given) {
        accum = 1;
        micro = c.global / r;
        if (micro < 1 || c.global % r != 0) {
          return make_error(ErrorCode::kConfig, "train_batch_size = ", c.global,
                            " is not a multiple of the ranks (", r,
                            "): DeepSpeed infers train_micro_batch_size_per_gpu from them");
        }
      }
      if (c.global % (micro * r) != 0) {
        return make_error(ErrorCode::kConfig, "train_batch_size = ", c.global,
                          " is not a multiple of train_micro_batch_size_per_gpu (", micro,
                          ") x ranks (", r,
                          "): DeepSpeed infers gradient_accumulation_steps from them");
      }
      accum = c.global / (micro * r);
      c.fill(micro_given ? "gradient_accumulation_steps" : "train_micro_batch_size_per_gpu",
             micro_given ? accum : micro,
             "train_batch_size / " + std::string(micro_given ? "(micro-batch x ranks)" : "ranks") +
                 ", as DeepSpeed infers it");
    } else {
      if (c.global % (accum * r) != 0) {
        return make_error(ErrorCode::kConfig, "train_batch_size = ", c.global,
                          " is not a multiple of gradient_accumulation_steps (", accum,
                          ") x ranks (", r,
                          "): DeepSpeed infers train_micro_batch_size_per_gpu from them");
      }
      micro = c.global / (accum * r);
      c.fill("train_micro_batch_size_per_gpu", micro,
             "train_batch_size / (accumulation x ranks), as DeepSpeed infers it");
    }
  }
  c.f.batch = micro;
  c.f.grad_accum = accum;
  if (c.micro > 0 || c.global > 0) c.f.config_keys["--batch"] = "train_micro_batch_size_per_gpu";
  if (c.accum > 0 || c.global > 0) c.f.config_keys["--grad-accum"] = "gradient_accumulation_steps";
  if (c.f.grad_accum > 1024) {
    return make_error(ErrorCode::kConfig, "gradient_accumulation_steps = ", c.f.grad_accum,
                      " (inferred from train_batch_size) is not accepted (1 to 1024)");
  }
  return ok_status();
}

// optimizer.params.adam_w_mode: DeepSpeed runs type AdamW decoupled whatever it says; type Adam
// with adam_w_mode false adds the decay to the gradient (L2): --adam-mode adam.
void apply_adam_mode(const json& j, Ctx& c) {
  if (!j.contains("optimizer") || !j["optimizer"].is_object()) return;
  const std::string type = ds::optimizer_type(j["optimizer"].value("type", json()));
  if (c.given("--adam-mode")) return;
  if (type == "adamw" && !c.adam_w_mode) {
    c.report.ignored.push_back(
        "optimizer.params.adam_w_mode (type AdamW decays decoupled whatever it says, as in "
        "DeepSpeed)");
  }
  c.f.adam_mode = type == "adam" && !c.adam_w_mode ? "adam" : "adamw";
}

}  // namespace

Status apply_config(const std::string& path, Flags& f, ConfigDeferred& deferred,
                    const std::function<bool(const std::string&)>& given, int ranks,
                    ConfigReport& report) {
  // A DeepSpeed config is a few KB: a regular file or a pipe (--config <(...)), bounded.
  STRATA_ASSIGN_OR_RETURN(const json j, model::read_json_input(path, "--config " + path,
                                                               {.max_bytes = model::kMaxConfigBytes,
                                                                .allow_pipe = true}));
  if (!j.is_object()) {
    return make_error(ErrorCode::kConfig, "--config ", path, ": the top level is not an object");
  }
  report.content = j.dump();
  Ctx c{f, deferred, report, given};
  Problems p;
  if (j.contains("scheduler") && j["scheduler"].is_object()) {
    const json& t = j["scheduler"].value("type", json());
    c.sched = t.is_string() ? t.get<std::string>() : "";
  }
  // The precision first: it decides which of fp16 and bf16 is read.
  auto fp16 = section_enabled(j, "fp16", "fp16", c, f.precision == "fp16");
  auto bf16 = section_enabled(j, "bf16", "bfloat16", c, f.precision == "bf16");
  p.add(fp16.status());
  p.add(bf16.status());
  const bool on16 = fp16.ok() && *fp16, onbf = bf16.ok() && *bf16;
  if (on16 && onbf) {
    p.add(
        make_error(ErrorCode::kConfig, "fp16.enabled and bf16.enabled are both true (enable one)"));
  }
  if (!given("--precision") && !j.empty()) {
    f.precision = on16 ? "fp16" : onbf ? "bf16" : "fp32";
    f.config_keys["--precision"] = on16 ? "fp16.enabled" : onbf ? "bf16.enabled" : "fp16/bf16";
    if (!on16 && !onbf) c.fill("precision", "fp32", kDsDefault + ": neither fp16 nor bf16 on");
  }
  walk(j, "", c, p);
  apply_defaults(j, c);
  p.add(resolve_batch(c, ranks));
  apply_adam_mode(j, c);
  if (!p.lines.empty()) {
    std::ostringstream os;
    os << "--config " << path << ": ";
    if (p.lines.size() == 1) {
      os << p.lines[0];
    } else {
      os << p.lines.size() << " problems (nothing was run):";
      for (size_t i = 0; i < p.lines.size() && i < kListed; ++i) os << "\n  " << p.lines[i];
      if (p.lines.size() > kListed) os << "\n  and " << p.lines.size() - kListed << " more";
    }
    return make_error(ErrorCode::kConfig, os.str());
  }
  // reduce_bucket_size counts elements; --bucket-mb MiB of gradients in the model's precision.
  if (c.reduce_bucket >= 0 && !given("--bucket-mb")) {
    const double bytes = f.precision == "fp32" ? 4.0 : 2.0;
    f.bucket_mb = static_cast<double>(c.reduce_bucket) * bytes / double(1 << 20);
    f.config_keys["--bucket-mb"] = "zero_optimization.reduce_bucket_size";
  }
  if (c.cos_min_ratio >= 0.0 && !given("--lr-min")) {
    f.lr_min = static_cast<float>(c.cos_min_ratio * static_cast<double>(f.lr));
  }
  return ok_status();
}

std::string describe(const ConfigReport& r) {
  std::ostringstream os;
  auto list = [&os](const char* head, const std::vector<std::string>& v) {
    if (v.empty()) return;
    os << "config: " << head;
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "; " : " ") << v[i];
    os << "\n";
  };
  list("filled in:", r.filled);
  list("ignored (cannot change the results here):", r.ignored);
  list("aliases:", r.aliases);
  for (size_t i = 0; i < r.warnings.size() && i < kListed; ++i) {
    os << "config: warning: " << r.warnings[i] << "\n";
  }
  if (r.warnings.size() > kListed) {
    os << "config: warning: and " << r.warnings.size() - kListed << " more\n";
  }
  return os.str();
}

void resolve_model_keys(const ConfigDeferred& d, Flags& f, int64_t layers, int64_t layer_numel,
                        int64_t hidden) {
  int64_t bucket = d.prefetch_bucket_elements;
  if (d.auto_prefetch_bucket) bucket = static_cast<int64_t>(0.9 * double(hidden * hidden));
  if (bucket >= 0) {
    const int64_t n = std::max<int64_t>(1, layer_numel);
    f.prefetch_depth = static_cast<int>(std::clamp<int64_t>((bucket + n - 1) / n, 0, 64));
  }
  if (d.auto_reduce_bucket) {
    const double bytes = f.precision == "fp32" ? 4.0 : 2.0;
    f.bucket_mb = double(hidden * hidden) * bytes / double(1 << 20);
  }
  if (d.auto_persistence) f.persistence_threshold = 10 * hidden;
  if (d.number_checkpoints > 0) {
    f.checkpoint_interval = (layers + d.number_checkpoints - 1) / d.number_checkpoints;
  }
}

Status check_rank_keys(const ConfigDeferred& d, const Flags& /*f*/, int /*ranks*/,
                       int64_t largest_partition) {
  if (d.sub_group_size > 0 && d.sub_group_size < largest_partition) {
    return make_error(ErrorCode::kConfig,
                      "--config: zero_optimization.sub_group_size = ", d.sub_group_size,
                      " is below the largest optimizer partition (", largest_partition,
                      " elements: strata's sub-groups are the model's blocks); use at least that");
  }
  return ok_status();
}

// A float as it was written (7 significant digits), not its double expansion.
static json num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.7g", x);
  return json(std::strtod(buf, nullptr));
}

json effective_config(const Flags& f) {
  json j;
  j["train_micro_batch_size_per_gpu"] = f.batch;
  j["gradient_accumulation_steps"] = f.grad_accum;
  j["gradient_clipping"] = num(f.grad_clip);
  j["steps_per_print"] = f.log_every;
  if (f.precision == "fp16") {
    j["fp16"] = {{"enabled", true},
                 {"loss_scale", f.loss_scale == "dynamic" ? 0.0 : std::stod(f.loss_scale)},
                 {"initial_scale_power", f.initial_scale_power},
                 {"loss_scale_window", f.loss_scale_window},
                 {"hysteresis", f.hysteresis},
                 {"consecutive_hysteresis", f.consecutive_hysteresis},
                 {"min_loss_scale", num(f.min_loss_scale)}};
  }
  j["bf16"] = {{"enabled", f.precision == "bf16"}};
  json z = {{"stage", f.zero_stage},
            {"reduce_bucket_size", f.bucket_mb == 0.0
                                       ? json("auto")
                                       : json(std::llround(f.bucket_mb * double(1 << 20) /
                                                           (f.precision == "fp32" ? 4.0 : 2.0)))},
            {"stage3_param_persistence_threshold", f.persistence_threshold}};
  z["offload_optimizer"] = {{"device", f.offload_optimizer},
                            {"ratio", num(1.0 - f.gpu_optimizer_fraction)},
                            {"buffer_count", f.nvme_buffer_count}};
  if (!f.nvme_path.empty()) z["offload_optimizer"]["nvme_path"] = f.nvme_path;
  if (f.zero_stage == 3) {
    z["offload_param"] = {{"device", f.offload_param.empty() ? "cpu" : f.offload_param},
                          {"buffer_count", f.prefetch_depth + 2}};
  }
  j["zero_optimization"] = z;
  j["activation_checkpointing"] = {{"cpu_checkpointing", f.offload_activations != "none"}};
  j["optimizer"] = {{"type", f.adam_mode == "adam" ? "Adam" : "AdamW"},
                    {"params",
                     {{"lr", num(f.lr)},
                      {"betas", {num(f.beta1), num(f.beta2)}},
                      {"eps", num(f.eps)},
                      {"weight_decay", num(f.weight_decay)},
                      {"adam_w_mode", f.adam_mode != "adam"},
                      {"bias_correction", !f.no_bias_correction}}},
                    {"weight_decay_on", f.weight_decay_on}};
  const char* type = f.lr_schedule == "cosine"   ? "WarmupCosineLR"
                     : f.lr_schedule == "linear" ? "WarmupDecayLR"
                                                 : "WarmupLR";
  json p = {{"warmup_num_steps", f.warmup}, {"warmup_type", f.warmup_type}};
  if (f.lr_schedule != "constant")
    p["total_num_steps"] = f.lr_decay_steps > 0 ? f.lr_decay_steps : f.steps;
  if (f.lr_schedule == "cosine") p["cos_min_ratio"] = num(f.lr > 0 ? f.lr_min / f.lr : 0.0);
  j["scheduler"] = {{"type", type}, {"params", p}};
  j["aio"] = {{"block_size", f.nvme_block_size}, {"queue_depth", f.nvme_queue_depth}};
  j["data_types"] = {{"grad_accum_dtype", f.grad_accum_dtype}};
  return j;
}

}  // namespace strata::train_gpt
