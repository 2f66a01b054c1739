#include "ds_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

namespace strata::train_gpt {
namespace {

using json = nlohmann::json;

// What a key's handler needs: where it is (for messages) and the shared state.
struct Ctx {
  const std::string& file;
  Flags& f;
  ConfigDeferred& d;
  const std::function<bool(const std::string&)>& given;
  std::string key;    // the dotted path of the key being read
  std::string sched;  // scheduler.type, read first
  std::string nvme;   // the nvme_path seen first, and from which key
  std::string nvme_key;
  double cos_min_ratio = -1.0;
  int64_t reduce_bucket = -1;  // elements
  bool fp16 = false, bf16 = false, has_fp16 = false, has_bf16 = false;

  Status bad(const std::string& value, const std::string& accepted) const {
    return make_error(ErrorCode::kConfig, "--config ", file, ": ", key, " = ", value,
                      " is not accepted (", accepted, ")");
  }
};

using Handler = std::function<Status(const json&, Ctx&)>;

std::string show(const json& v) { return v.dump(); }

// Typed readers: the value, or an error naming the key.
Status read_int(const json& v, Ctx& c, int64_t lo, int64_t hi, int64_t& out) {
  double x = 0.0;
  if (v.is_number_integer()) {
    x = static_cast<double>(v.get<int64_t>());
  } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
    x = v.get<double>();  // 5e8 as DeepSpeed configs often write it
  } else {
    return c.bad(show(v), "an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  if (x < static_cast<double>(lo) || x > static_cast<double>(hi)) {
    return c.bad(show(v), "an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  out = static_cast<int64_t>(x);
  return ok_status();
}
Status read_num(const json& v, Ctx& c, double lo, double hi, double& out) {
  if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi) {
    std::ostringstream r;
    r << "a number from " << lo << " to " << hi;
    return c.bad(show(v), r.str());
  }
  out = v.get<double>();
  return ok_status();
}
Status read_bool(const json& v, Ctx& c, bool& out) {
  if (!v.is_boolean()) return c.bad(show(v), "true or false");
  out = v.get<bool>();
  return ok_status();
}

// Handlers that set one flag unless it was given on the command line.
template <typename T>
Handler int_flag(const char* flag, T Flags::*field, int64_t lo, int64_t hi) {
  return [=](const json& v, Ctx& c) -> Status {
    int64_t x = 0;
    STRATA_RETURN_IF_ERROR(read_int(v, c, lo, hi, x));
    if (!c.given(flag)) c.f.*field = static_cast<T>(x);
    return ok_status();
  };
}
template <typename T>
Handler num_flag(const char* flag, T Flags::*field, double lo, double hi) {
  return [=](const json& v, Ctx& c) -> Status {
    double x = 0.0;
    STRATA_RETURN_IF_ERROR(read_num(v, c, lo, hi, x));
    if (!c.given(flag)) c.f.*field = static_cast<T>(x);
    return ok_status();
  };
}
Handler tier_flag(const char* flag, std::string Flags::*field) {
  return [=](const json& v, Ctx& c) -> Status {
    if (!v.is_string() || (v != "none" && v != "cpu" && v != "nvme")) {
      return c.bad(show(v), "\"none\", \"cpu\" or \"nvme\"");
    }
    if (!c.given(flag)) c.f.*field = v.get<std::string>();
    return ok_status();
  };
}
// A key whose only accepted value is what strata does anyway.
Handler fixed(const json& accepted, const char* why) {
  return [=](const json& v, Ctx& c) -> Status {
    if (v != accepted) return c.bad(show(v), "only " + accepted.dump() + ": " + why);
    return ok_status();
  };
}
Handler nvme_path() {
  return [](const json& v, Ctx& c) -> Status {
    if (!v.is_string() || v.get<std::string>().empty()) return c.bad(show(v), "a directory");
    const std::string p = v.get<std::string>();
    if (!c.nvme.empty() && p != c.nvme) {
      return c.bad(show(v), "the same directory as " + c.nvme_key + " (\"" + c.nvme +
                                "\"): strata keeps every swap file in one --nvme-path");
    }
    c.nvme = p;
    c.nvme_key = c.key;
    if (!c.given("--nvme-path")) c.f.nvme_path = p;
    return ok_status();
  };
}
// A scheduler parameter: accepted for the types listed.
Handler sched_param(std::vector<std::string> types, Handler h) {
  return [=](const json& v, Ctx& c) -> Status {
    if (std::find(types.begin(), types.end(), c.sched) == types.end()) {
      std::string list;
      for (const auto& t : types) list += (list.empty() ? "" : ", ") + t;
      return make_error(ErrorCode::kConfig, "--config ", c.file, ": ", c.key,
                        " does not apply to scheduler type ", c.sched.empty() ? "(none)" : c.sched,
                        " (it is a parameter of ", list, ")");
    }
    return h(v, c);
  };
}

const std::map<std::string, Handler>& handlers() {
  static const std::map<std::string, Handler> table = [] {
    std::map<std::string, Handler> t;
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
    t[z + "stage3_param_persistence_threshold"] = int_flag(
        "--param-persistence-threshold", &Flags::persistence_threshold, 0, int64_t{1} << 40);
    t[z + "sub_group_size"] = [](const json& v, Ctx& c) {
      return read_int(v, c, 1, int64_t{1} << 50, c.d.sub_group_size);
    };
    t[z + "overlap_comm"] = fixed(true, "strata always overlaps communication with compute");
    t[z + "contiguous_gradients"] = fixed(true, "each block's gradient is one contiguous buffer");
    t[z + "reduce_scatter"] = fixed(true, "gradients are always reduce-scattered");
    t[z + "allgather_partitions"] = fixed(true, "new parameters are always all-gathered");
    t[z + "stage3_gather_16bit_weights_on_model_save"] =
        fixed(true, "--save-model always gathers the whole 16-bit weights");
    // DeepSpeed's nvme device keeps all of the optimizer state there.
    t[oo + "device"] = [tier = tier_flag("--offload-optimizer", &Flags::offload_optimizer)](
                           const json& v, Ctx& c) -> Status {
      STRATA_RETURN_IF_ERROR(tier(v, c));
      if (v == "nvme" && !c.given("--optimizer-nvme-fraction")) c.f.nvme_fraction = 1.0;
      return ok_status();
    };
    t[oo + "nvme_path"] = nvme_path();
    t[oo + "ratio"] = [](const json& v, Ctx& c) -> Status {
      double x = 0.0;
      STRATA_RETURN_IF_ERROR(read_num(v, c, 0.0, 1.0, x));
      if (!c.given("--gpu-optimizer-fraction")) c.f.gpu_optimizer_fraction = 1.0 - x;
      return ok_status();
    };
    t[oo + "pin_memory"] = fixed(true, "strata's host buffers are always pinned");
    t[oo + "buffer_count"] = int_flag("--nvme-buffer-count", &Flags::nvme_buffer_count, 1, 64);
    t[oo + "fast_init"] = fixed(false, "the state is written to NVMe as it is initialised");
    t[op + "device"] = tier_flag("--offload-param", &Flags::offload_param);
    t[op + "nvme_path"] = nvme_path();
    t[op + "pin_memory"] = fixed(true, "strata's host buffers are always pinned");
    t[op + "buffer_count"] = [](const json& v, Ctx& c) -> Status {
      int64_t x = 0;
      STRATA_RETURN_IF_ERROR(read_int(v, c, 2, 66, x));
      if (!c.given("--prefetch-depth")) c.f.prefetch_depth = static_cast<int>(x - 2);
      return ok_status();
    };
    const std::string ac = "activation_checkpointing.";
    t[ac + "cpu_checkpointing"] = [](const json& v, Ctx& c) -> Status {
      bool on = false;
      STRATA_RETURN_IF_ERROR(read_bool(v, c, on));
      if (!c.given("--offload-activations")) c.f.offload_activations = on ? "cpu" : "none";
      return ok_status();
    };
    t[ac + "number_checkpoints"] = [](const json& v, Ctx& c) -> Status {
      int64_t x = 0;
      STRATA_RETURN_IF_ERROR(read_int(v, c, 1, 1 << 20, x));
      if (!c.given("--checkpoint-interval")) c.d.number_checkpoints = x;
      return ok_status();
    };
    for (const char* k : {"partition_activations", "contiguous_memory_optimization",
                          "synchronize_checkpoint_boundary", "profile"}) {
      t[ac + k] = fixed(false, "strata has no model parallelism or checkpoint profiler");
    }
    t["fp16.enabled"] = [](const json& v, Ctx& c) { return read_bool(v, c, c.fp16); };
    t["fp16.loss_scale"] = [](const json& v, Ctx& c) -> Status {
      double x = 0.0;
      STRATA_RETURN_IF_ERROR(read_num(v, c, 0.0, 1e38, x));
      if (!c.given("--loss-scale")) {
        std::ostringstream s;
        s << x;
        c.f.loss_scale = x == 0.0 ? "dynamic" : s.str();
      }
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
      if (!c.given("--consecutive-hysteresis")) c.f.consecutive_hysteresis = on;
      return ok_status();
    };
    t["fp16.min_loss_scale"] = num_flag("--min-loss-scale", &Flags::min_loss_scale, 1e-30, 1e38);
    t["bf16.enabled"] = [](const json& v, Ctx& c) { return read_bool(v, c, c.bf16); };
    t["gradient_clipping"] = num_flag("--grad-clip", &Flags::grad_clip, 0.0, 1e6);
    t["train_micro_batch_size_per_gpu"] = int_flag("--batch", &Flags::batch, 1, 1 << 16);
    t["train_batch_size"] = [](const json& v, Ctx& c) {
      return read_int(v, c, 1, int64_t{1} << 40, c.d.train_batch_size);
    };
    t["gradient_accumulation_steps"] = int_flag("--grad-accum", &Flags::grad_accum, 1, 1024);
    t["steps_per_print"] = int_flag("--log-every", &Flags::log_every, 1, int64_t{1} << 40);
    t["wall_clock_breakdown"] = fixed(false, "use --trace for a timeline of every task");
    t["optimizer.type"] = [](const json& v, Ctx& c) -> Status {
      std::string s = v.is_string() ? v.get<std::string>() : "";
      std::transform(s.begin(), s.end(), s.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      if (s != "adam" && s != "adamw") {
        return c.bad(show(v),
                     "\"Adam\" or \"AdamW\": strata's optimizer is AdamW, on the CPU "
                     "or the device");
      }
      return ok_status();
    };
    t["optimizer.params.lr"] = num_flag("--lr", &Flags::lr, 0.0, 1.0);
    t["optimizer.params.betas"] = [](const json& v, Ctx& c) -> Status {
      if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number() ||
          v[0].get<double>() < 0 || v[0].get<double>() >= 1 || v[1].get<double>() < 0 ||
          v[1].get<double>() >= 1) {
        return c.bad(show(v), "two numbers in [0, 1), e.g. [0.9, 0.999]");
      }
      if (!c.given("--beta1")) c.f.beta1 = v[0].get<float>();
      if (!c.given("--beta2")) c.f.beta2 = v[1].get<float>();
      return ok_status();
    };
    t["optimizer.params.eps"] = num_flag("--eps", &Flags::eps, 1e-30, 1.0);
    t["optimizer.params.weight_decay"] = num_flag("--weight-decay", &Flags::weight_decay, 0.0, 1.0);
    t["optimizer.params.adam_w_mode"] = fixed(true, "the weight decay is decoupled (AdamW)");
    t["optimizer.params.bias_correction"] = fixed(true, "Adam's bias correction is always on");
    t["optimizer.params.torch_adam"] = fixed(false, "strata's Adam is its own SIMD CPU Adam");
    t["scheduler.type"] = [](const json& v, Ctx& c) -> Status {
      const std::string s = v.is_string() ? v.get<std::string>() : "";
      const char* kind = s == "WarmupLR"         ? "constant"
                         : s == "WarmupCosineLR" ? "cosine"
                         : s == "WarmupDecayLR"  ? "linear"
                                                 : nullptr;
      if (kind == nullptr) {
        return c.bad(show(v), "\"WarmupLR\", \"WarmupCosineLR\" or \"WarmupDecayLR\"");
      }
      if (!c.given("--lr-schedule")) c.f.lr_schedule = kind;
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
      if (v != "log" && v != "linear") return c.bad(show(v), "\"log\" or \"linear\"");
      if (!c.given("--warmup-type")) c.f.warmup_type = v.get<std::string>();
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
    t["aio.block_size"] = [](const json& v, Ctx& c) -> Status {
      int64_t x = 0;
      STRATA_RETURN_IF_ERROR(read_int(v, c, 4096, int64_t{1} << 30, x));
      if (x % 4096 != 0) return c.bad(show(v), "a multiple of 4096 bytes");
      if (!c.given("--nvme-block-size")) c.f.nvme_block_size = static_cast<uint64_t>(x);
      return ok_status();
    };
    t["aio.queue_depth"] = int_flag("--nvme-queue-depth", &Flags::nvme_queue_depth, 1, 4096);
    t["aio.thread_count"] = fixed(1, "one io_uring submission thread per swap store");
    t["aio.single_submit"] = fixed(false, "requests are submitted in batches");
    t["aio.overlap_events"] = fixed(true, "submission and completion always overlap");
    t["aio.use_gds"] = fixed(false, "NVMe reads go through pinned host memory");
    return t;
  }();
  return table;
}

// Objects that hold keys (every prefix of a handled key).
bool is_object_path(const std::string& path) {
  for (const auto& [k, h] : handlers()) {
    if (k.size() > path.size() && k.compare(0, path.size(), path) == 0 && k[path.size()] == '.') {
      return true;
    }
  }
  return false;
}

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

// The known key (leaf or object) nearest to `path`: by the distance of the whole paths or of
// their last names (a key put in the wrong section), then of the whole paths.
std::string nearest(const std::string& path) {
  auto last = [](const std::string& k) { return k.substr(k.rfind('.') + 1); };
  std::string best;
  std::pair<size_t, size_t> d{std::string::npos, std::string::npos};
  auto consider = [&](const std::string& k) {
    const size_t whole = edit_distance(path, k);
    const std::pair<size_t, size_t> e{std::min(whole, edit_distance(last(path), last(k))), whole};
    if (e < d) {
      d = e;
      best = k;
    }
  };
  for (const auto& [k, h] : handlers()) {
    consider(k);
    for (size_t dot = k.find('.'); dot != std::string::npos; dot = k.find('.', dot + 1)) {
      consider(k.substr(0, dot));
    }
  }
  return best;
}

// A float as it was written (7 significant digits), not its double expansion.
json num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.7g", x);
  return json(std::strtod(buf, nullptr));
}

Status walk(const json& obj, const std::string& prefix, Ctx& c) {
  for (const auto& [key, value] : obj.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    c.key = path;
    const auto it = handlers().find(path);
    if (it != handlers().end()) {
      if (value == "auto") continue;  // the flag keeps its value
      STRATA_RETURN_IF_ERROR(it->second(value, c));
      continue;
    }
    if (is_object_path(path)) {
      if (!value.is_object()) return c.bad(show(value), "an object of keys");
      STRATA_RETURN_IF_ERROR(walk(value, path, c));
      continue;
    }
    return make_error(ErrorCode::kConfig, "--config ", c.file, ": unknown key ", path,
                      " (the nearest known key is ", nearest(path),
                      "; strata refuses keys it does not act on, docs/training.md lists them)");
  }
  return ok_status();
}

}  // namespace

Status apply_config(const std::string& path, Flags& f, ConfigDeferred& deferred,
                    const std::function<bool(const std::string&)>& given) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return make_error(ErrorCode::kConfig, "--config ", path,
                      " is a directory (give a DeepSpeed JSON file)");
  }
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::kIo, "--config ", path, ": cannot open the file");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    return make_error(ErrorCode::kCorrupt, "--config ", path, ": not JSON (", e.what(), ")");
  }
  if (!j.is_object()) {
    return make_error(ErrorCode::kConfig, "--config ", path, ": the top level is not an object");
  }
  Ctx c{path, f, deferred, given};
  if (j.contains("scheduler") && j["scheduler"].is_object()) {
    c.sched = j["scheduler"].value("type", "");
  }
  c.has_fp16 = j.contains("fp16");
  c.has_bf16 = j.contains("bf16");
  STRATA_RETURN_IF_ERROR(walk(j, "", c));
  // The precision: fp16 or bf16 as enabled; neither section means fp32, as in DeepSpeed.
  if (c.fp16 && c.bf16) {
    return make_error(ErrorCode::kConfig, "--config ", path,
                      ": fp16.enabled and bf16.enabled are both true (enable one)");
  }
  if (!given("--precision") && (c.has_fp16 || c.has_bf16 || !j.empty())) {
    f.precision = c.fp16 ? "fp16" : c.bf16 ? "bf16" : "fp32";
  }
  // reduce_bucket_size counts elements; --bucket-mb MiB of gradients in the model's precision.
  if (c.reduce_bucket >= 0 && !given("--bucket-mb")) {
    const double bytes = f.precision == "fp32" ? 4.0 : 2.0;
    f.bucket_mb = static_cast<double>(c.reduce_bucket) * bytes / double(1 << 20);
  }
  if (c.cos_min_ratio >= 0.0 && !given("--lr-min")) {
    f.lr_min = static_cast<float>(c.cos_min_ratio * static_cast<double>(f.lr));
  }
  return ok_status();
}

void resolve_model_keys(const ConfigDeferred& d, Flags& f, int64_t layers, int64_t layer_numel) {
  if (d.prefetch_bucket_elements >= 0) {
    f.prefetch_depth = static_cast<int>(
        std::clamp<int64_t>(d.prefetch_bucket_elements / std::max<int64_t>(1, layer_numel), 0, 64));
  }
  if (d.number_checkpoints > 0) {
    f.checkpoint_interval = (layers + d.number_checkpoints - 1) / d.number_checkpoints;
  }
}

Status check_rank_keys(const ConfigDeferred& d, const Flags& f, int ranks,
                       int64_t largest_partition) {
  if (d.train_batch_size > 0 && d.train_batch_size != f.batch * f.grad_accum * ranks) {
    return make_error(ErrorCode::kConfig, "--config: train_batch_size = ", d.train_batch_size,
                      " is not train_micro_batch_size_per_gpu (", f.batch,
                      ") x gradient_accumulation_steps (", f.grad_accum, ") x ranks (", ranks,
                      ") = ", f.batch * f.grad_accum * ranks,
                      " (make them agree, or leave train_batch_size out)");
  }
  if (d.sub_group_size > 0 && d.sub_group_size < largest_partition) {
    return make_error(ErrorCode::kConfig,
                      "--config: zero_optimization.sub_group_size = ", d.sub_group_size,
                      " is below the largest optimizer partition (", largest_partition,
                      " elements: strata's sub-groups are the model's blocks); use at least that");
  }
  return ok_status();
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
  j["optimizer"] = {{"type", "AdamW"},
                    {"params",
                     {{"lr", num(f.lr)},
                      {"betas", {num(f.beta1), num(f.beta2)}},
                      {"eps", num(f.eps)},
                      {"weight_decay", num(f.weight_decay)}}}};
  const char* type = f.lr_schedule == "cosine"   ? "WarmupCosineLR"
                     : f.lr_schedule == "linear" ? "WarmupDecayLR"
                                                 : "WarmupLR";
  json p = {{"warmup_num_steps", f.warmup}, {"warmup_type", f.warmup_type}};
  if (f.lr_schedule != "constant")
    p["total_num_steps"] = f.lr_decay_steps > 0 ? f.lr_decay_steps : f.steps;
  if (f.lr_schedule == "cosine") p["cos_min_ratio"] = num(f.lr > 0 ? f.lr_min / f.lr : 0.0);
  j["scheduler"] = {{"type", type}, {"params", p}};
  j["aio"] = {{"block_size", f.nvme_block_size}, {"queue_depth", f.nvme_queue_depth}};
  return j;
}

}  // namespace strata::train_gpt
