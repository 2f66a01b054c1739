#include "engine/config_exchange.h"

#include <cstring>
#include <string>
#include <vector>

namespace strata::engine {

namespace {
// The scalar fields, each by its JSON name, read and written by one visitor.
template <typename Config, typename Visit>
void visit_fields(Config& c, Visit&& v) {
  v("zero_stage", c.zero_stage);
  v("schedule", c.schedule);
  v("offload_optimizer", c.offload_optimizer);
  v("optimizer_nvme_fraction", c.optimizer_nvme_fraction);
  v("gpu_optimizer_fraction", c.gpu_optimizer_fraction);
  v("param_gpu_fraction", c.param_gpu_fraction);
  v("offload_activations", c.offload_activations);
  v("prefetch_depth", c.prefetch_depth);
  v("bucket_bytes", c.bucket_bytes);
  v("persistence_threshold", c.persistence_threshold);
  v("delayed_update_warmup", c.delayed_update_warmup);
  v("grad_accum", c.grad_accum);
  v("grad_accum_dtype", c.grad_accum_dtype);
  v("microbatch_order", c.microbatch_order);
  v("device_grad_sum", c.device_grad_sum);
  v("grad_clip", c.grad_clip);
  v("loss_scale", c.loss_scaling.loss_scale);
  v("initial_scale_power", c.loss_scaling.initial_scale_power);
  v("loss_scale_window", c.loss_scaling.loss_scale_window);
  v("hysteresis", c.loss_scaling.hysteresis);
  v("min_loss_scale", c.loss_scaling.min_loss_scale);
  v("consecutive_hysteresis", c.loss_scaling.consecutive_hysteresis);
  v("lr", c.adam.lr);
  v("beta1", c.adam.beta1);
  v("beta2", c.adam.beta2);
  v("eps", c.adam.eps);
  v("weight_decay", c.adam.weight_decay);
  v("adam_mode", c.adam.mode);
  v("bias_correction", c.adam.bias_correction);
  v("decay_on", c.decay_on);
  v("gpu_memory_limit", c.gpu_memory_limit);
  v("host_memory_limit", c.host_memory_limit);
  v("nvme_paths", c.nvme_paths);
  v("nvme_block_size", c.nvme_block_size);
  v("nvme_queue_depth", c.nvme_queue_depth);
  v("nvme_buffer_count", c.nvme_buffer_count);
}

// Enums travel as their underlying integers.
template <typename T>
nlohmann::json to_value(const T& v) {
  if constexpr (std::is_enum_v<T>) {
    return static_cast<std::underlying_type_t<T>>(v);
  } else {
    return v;
  }
}
template <typename T>
T from_value(const nlohmann::json& j) {
  if constexpr (std::is_enum_v<T>) {
    return static_cast<T>(j.get<std::underlying_type_t<T>>());
  } else {
    return j.get<T>();
  }
}
}  // namespace

nlohmann::json config_to_json(const EngineConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  visit_fields(config, [&j](const char* name, const auto& v) { j[name] = to_value(v); });
  j["precision"] = static_cast<int>(config.precision);
  if (config.offload_param) j["offload_param"] = static_cast<int>(*config.offload_param);
  return j;
}

Result<EngineConfig> config_from_json(const nlohmann::json& j) {
  EngineConfig c;
  std::string bad;
  visit_fields(c, [&](const char* name, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if (!bad.empty()) return;
    try {
      v = from_value<T>(j.at(name));
    } catch (const nlohmann::json::exception&) {
      bad = name;
    }
  });
  try {
    c.precision = static_cast<DType>(j.at("precision").get<int>());
    if (j.contains("offload_param")) {
      c.offload_param = static_cast<Home>(j.at("offload_param").get<int>());
    }
  } catch (const nlohmann::json::exception&) {
    bad = bad.empty() ? "precision or offload_param" : bad;
  }
  if (!bad.empty()) {
    return make_error(ErrorCode::kCorrupt, "engine config: field ", bad, " missing or mistyped");
  }
  return c;
}

Status broadcast_config(EngineConfig& config, comm::Communicator& comm, int root) {
  if (comm.size() == 1) return ok_status();
  // The length, then the text, as 4-byte elements (a broadcast copies bits). A config the text
  // cannot carry (a non-finite number, a path that is not UTF-8) is sent as length kUnsent, so
  // that every rank refuses it together.
  constexpr uint32_t kUnsent = 0xFFFFFFFFu;
  std::string text;
  uint32_t n = 0;
  if (comm.rank() == root) {
    try {
      text = config_to_json(config).dump();
      n = config_from_json(nlohmann::json::parse(text)).ok() ? uint32_t(text.size()) : kUnsent;
    } catch (const nlohmann::json::exception&) {
      n = kUnsent;
    }
  }
  float length = 0.0f;
  std::memcpy(&length, &n, sizeof n);
  STRATA_RETURN_IF_ERROR(comm.broadcast(&length, 1, DType::kF32, root));
  uint32_t size = 0;
  std::memcpy(&size, &length, sizeof size);
  if (size == kUnsent) {
    return make_error(ErrorCode::kConfig, "engine config: rank ", root,
                      "'s cannot be sent (a value that is not a "
                      "finite number, or a path that is not UTF-8)");
  }
  std::vector<float> words((size + 3) / 4, 0.0f);
  std::memcpy(words.data(), text.data(), text.size());
  STRATA_RETURN_IF_ERROR(comm.broadcast(words.data(), words.size(), DType::kF32, root));
  if (comm.rank() == root) return ok_status();
  text.assign(reinterpret_cast<const char*>(words.data()), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(ErrorCode::kCorrupt, "engine config: bad broadcast");
  STRATA_ASSIGN_OR_RETURN(config, config_from_json(j));
  return ok_status();
}

}  // namespace strata::engine
