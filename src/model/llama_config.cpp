#include "model/llama_config.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>

#include "model/config.h"
#include "model/json_input.h"

namespace strata::model {

namespace {

using nlohmann::json;

Status field_error(const std::string& what, const std::string& field, const std::string& value,
                   const std::string& accepted) {
  return make_error(ErrorCode::kConfig, what, ": ", field, " = ", value, ": ", accepted);
}

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

int64_t LlamaConfig::layer_params() const {
  const int64_t hs = head_size();
  return 2 * channels + channels * (heads + 2 * kv_heads) * hs + channels * channels +
         3 * channels * intermediate;
}

int64_t LlamaConfig::shared_params() const { return vocab * channels * (tied ? 1 : 2) + channels; }

std::string LlamaConfig::describe() const {
  std::ostringstream os;
  os << "llama L=" << layers << " C=" << channels << " NH=" << heads << " NKV=" << kv_heads
     << " I=" << intermediate << " V=" << vocab << (tied ? " tied " : " ") << dtype_name(dtype);
  return os.str();
}

Status LlamaConfig::validate(const std::string& what) const {
  auto positive = [&](const char* field, int64_t v) -> Status {
    if (v > 0) return ok_status();
    return field_error(what, field, std::to_string(v), "must be > 0");
  };
  STRATA_RETURN_IF_ERROR(positive("vocab_size", vocab));
  STRATA_RETURN_IF_ERROR(positive("hidden_size", channels));
  STRATA_RETURN_IF_ERROR(positive("intermediate_size", intermediate));
  STRATA_RETURN_IF_ERROR(positive("num_hidden_layers", layers));
  STRATA_RETURN_IF_ERROR(positive("num_attention_heads", heads));
  STRATA_RETURN_IF_ERROR(positive("num_key_value_heads", kv_heads));
  STRATA_RETURN_IF_ERROR(positive("max_position_embeddings", max_seq));
  // Bounded before anything is sized by them (model/config.h).
  auto at_most = [&](const char* field, int64_t v, int64_t max) -> Status {
    if (v <= max) return ok_status();
    return field_error(what, field, std::to_string(v),
                       "at most " + std::to_string(max) + " is accepted");
  };
  STRATA_RETURN_IF_ERROR(at_most("vocab_size", vocab, (int64_t{1} << 31) - 1));
  STRATA_RETURN_IF_ERROR(at_most("hidden_size", channels, kMaxModelWidth));
  STRATA_RETURN_IF_ERROR(at_most("intermediate_size", intermediate, kMaxModelWidth));
  STRATA_RETURN_IF_ERROR(at_most("num_hidden_layers", layers, kMaxModelLayers));
  STRATA_RETURN_IF_ERROR(at_most("num_attention_heads", heads, kMaxModelWidth));
  STRATA_RETURN_IF_ERROR(at_most("num_key_value_heads", kv_heads, kMaxModelWidth));
  STRATA_RETURN_IF_ERROR(at_most("max_position_embeddings", max_seq, kMaxModelSeq));
  if (num_params() > kMaxModelParams) {
    return field_error(what, "the parameter count", std::to_string(num_params()),
                       "at most " + std::to_string(kMaxModelParams) + " is accepted");
  }
  if (channels % heads != 0) {
    return field_error(what, "num_attention_heads", std::to_string(heads),
                       "must divide hidden_size " + std::to_string(channels));
  }
  if (heads % kv_heads != 0) {
    return field_error(what, "num_key_value_heads", std::to_string(kv_heads),
                       "must divide num_attention_heads " + std::to_string(heads));
  }
  if (head_size() % 2 != 0) {
    return field_error(what, "hidden_size / num_attention_heads", std::to_string(head_size()),
                       "the head size must be even (rotary pairs)");
  }
  if (!(rms_eps > 0 && rms_eps < 1)) {
    return field_error(what, "rms_norm_eps", number_text(rms_eps), "must be in (0, 1)");
  }
  if (!(rope_theta > 0 && std::isfinite(rope_theta))) {
    return field_error(what, "rope_theta", number_text(rope_theta), "must be > 0 and finite");
  }
  if (rope_scaling.enabled) {
    const auto& r = rope_scaling;
    if (!(r.factor >= 1.0) || !(r.high_freq_factor > r.low_freq_factor) ||
        !(r.low_freq_factor > 0) || r.original_max_position <= 0) {
      std::ostringstream v;
      v << "{factor " << r.factor << ", low_freq_factor " << r.low_freq_factor
        << ", high_freq_factor " << r.high_freq_factor << ", original_max_position_embeddings "
        << r.original_max_position << "}";
      return field_error(what, "rope_scaling", v.str(),
                         "llama3 needs factor >= 1, 0 < low_freq_factor < high_freq_factor and "
                         "original_max_position_embeddings > 0");
    }
  }
  return ok_status();
}

std::vector<float> LlamaConfig::inv_freq() const {
  const int64_t hs = head_size();
  std::vector<float> out(static_cast<size_t>(hs / 2));
  const auto& r = rope_scaling;
  const double low_wavelen = static_cast<double>(r.original_max_position) / r.low_freq_factor;
  const double high_wavelen = static_cast<double>(r.original_max_position) / r.high_freq_factor;
  for (int64_t i = 0; i < hs / 2; ++i) {
    double f = std::pow(rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(hs));
    if (r.enabled) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= r.factor;                       // low frequencies: interpolated
      } else if (wavelen >= high_wavelen) {  // between: blended
        const double smooth =
            (static_cast<double>(r.original_max_position) / wavelen - r.low_freq_factor) /
            (r.high_freq_factor - r.low_freq_factor);
        f = (1.0 - smooth) * f / r.factor + smooth * f;
      }
    }
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

Result<LlamaConfig> parse_hf_llama_config(const std::string& text, const std::string& what) {
  STRATA_ASSIGN_OR_RETURN(const json j, parse_json_input(text, what));
  if (!j.is_object()) return make_error(ErrorCode::kCorrupt, what, ": not a JSON object");
  // The family.
  const std::string model_type = j.value("model_type", std::string());
  bool llama = model_type == "llama";
  if (model_type.empty() && j.contains("architectures") && j["architectures"].is_array()) {
    for (const json& a : j["architectures"]) llama |= a == "LlamaForCausalLM";
  }
  if (!llama) {
    return field_error(what, "model_type", model_type.empty() ? "(none)" : "\"" + model_type + "\"",
                       "strata reads Llama checkpoints (model_type \"llama\", "
                       "LlamaForCausalLM); Mistral, Qwen2 and others are not read yet");
  }
  LlamaConfig c;
  c.dtype = DType::kF32;
  auto integer = [&](const char* field, int64_t& out, bool required) -> Status {
    if (!j.contains(field) || j[field].is_null()) {
      if (!required) return ok_status();
      return make_error(ErrorCode::kConfig, what, ": ", field, " is missing");
    }
    if (!j[field].is_number_integer()) {
      return field_error(what, field, j[field].dump(), "must be an integer");
    }
    out = j[field].get<int64_t>();
    return ok_status();
  };
  auto number = [&](const json& obj, const char* field, double& out) -> Status {
    if (!obj.contains(field) || obj[field].is_null()) return ok_status();
    if (!obj[field].is_number()) return field_error(what, field, obj[field].dump(), "a number");
    out = obj[field].get<double>();
    return ok_status();
  };
  STRATA_RETURN_IF_ERROR(integer("vocab_size", c.vocab, true));
  STRATA_RETURN_IF_ERROR(integer("hidden_size", c.channels, true));
  STRATA_RETURN_IF_ERROR(integer("intermediate_size", c.intermediate, true));
  STRATA_RETURN_IF_ERROR(integer("num_hidden_layers", c.layers, true));
  STRATA_RETURN_IF_ERROR(integer("num_attention_heads", c.heads, true));
  c.kv_heads = c.heads;
  STRATA_RETURN_IF_ERROR(integer("num_key_value_heads", c.kv_heads, false));
  c.max_seq = 2048;  // Hugging Face's LlamaConfig default
  STRATA_RETURN_IF_ERROR(integer("max_position_embeddings", c.max_seq, false));
  c.rms_eps = 1e-6;  // Hugging Face's LlamaConfig default
  STRATA_RETURN_IF_ERROR(number(j, "rms_norm_eps", c.rms_eps));
  STRATA_RETURN_IF_ERROR(number(j, "rope_theta", c.rope_theta));
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_null()) {
    if (!j["tie_word_embeddings"].is_boolean()) {
      return field_error(what, "tie_word_embeddings", j["tie_word_embeddings"].dump(),
                         "true or false");
    }
    c.tied = j["tie_word_embeddings"].get<bool>();
  }
  // What would change the maths.
  for (const char* field : {"attention_bias", "mlp_bias"}) {
    if (!j.contains(field) || j[field].is_null() || j[field] == false) continue;
    return field_error(what, field, j[field].dump(),
                       j[field] == true
                           ? "strata's Llama has no biases (Llama, Llama 2 and 3 have none)"
                           : "false, true or null (strata's Llama has no biases)");
  }
  if (j.contains("hidden_act") && j["hidden_act"] != "silu") {
    return field_error(what, "hidden_act", j["hidden_act"].dump(),
                       "only \"silu\" (the SwiGLU MLP) is implemented");
  }
  if (j.contains("head_dim") && !j["head_dim"].is_null() && c.heads > 0 &&
      j["head_dim"] != c.channels / c.heads) {
    return field_error(
        what, "head_dim", j["head_dim"].dump(),
        "must be hidden_size / num_attention_heads = " + std::to_string(c.channels / c.heads));
  }
  if (j.contains("attention_dropout") && !j["attention_dropout"].is_null() &&
      (!j["attention_dropout"].is_number() || j["attention_dropout"].get<double>() != 0.0)) {
    return field_error(what, "attention_dropout", j["attention_dropout"].dump(),
                       "dropout is not implemented (0 is accepted)");
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& r = j["rope_scaling"];
    const std::string type =
        r.is_object() ? r.value("rope_type", r.value("type", std::string())) : std::string();
    if (type != "llama3" && type != "default") {
      return field_error(what, "rope_scaling", r.dump(),
                         "null or rope_type \"llama3\" (linear, dynamic, yarn and others are not "
                         "implemented)");
    }
    if (type == "llama3") {
      c.rope_scaling.enabled = true;
      STRATA_RETURN_IF_ERROR(number(r, "factor", c.rope_scaling.factor));
      STRATA_RETURN_IF_ERROR(number(r, "low_freq_factor", c.rope_scaling.low_freq_factor));
      STRATA_RETURN_IF_ERROR(number(r, "high_freq_factor", c.rope_scaling.high_freq_factor));
      double orig = static_cast<double>(c.rope_scaling.original_max_position);
      STRATA_RETURN_IF_ERROR(number(r, "original_max_position_embeddings", orig));
      if (!(orig >= 1 && orig <= static_cast<double>(kMaxModelSeq)) || std::floor(orig) != orig) {
        return field_error(what, "rope_scaling.original_max_position_embeddings", number_text(orig),
                           "an integer from 1 to " + std::to_string(kMaxModelSeq));
      }
      c.rope_scaling.original_max_position = static_cast<int64_t>(orig);
    }
  }
  STRATA_RETURN_IF_ERROR(c.validate(what));
  return c;
}

Result<LlamaConfig> read_hf_llama_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string file =
      fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
  const std::string what = "config " + file;
  STRATA_ASSIGN_OR_RETURN(const std::string text,
                          read_input_file(file, what, {.max_bytes = kMaxConfigBytes}));
  return parse_hf_llama_config(text, what);
}

std::string hf_llama_config_json(const LlamaConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = c.vocab;
  j["hidden_size"] = c.channels;
  j["intermediate_size"] = c.intermediate;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  j["head_dim"] = c.head_size();
  j["max_position_embeddings"] = c.max_seq;
  j["rms_norm_eps"] = c.rms_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.enabled) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling.factor},
        {"low_freq_factor", c.rope_scaling.low_freq_factor},
        {"high_freq_factor", c.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.tied;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["torch_dtype"] = c.dtype == DType::kBF16  ? "bfloat16"
                     : c.dtype == DType::kF16 ? "float16"
                                              : "float32";
  return j.dump(2) + "\n";
}

namespace {

struct Preset {
  const char* name;
  int64_t vocab, channels, intermediate, layers, heads, kv_heads, max_seq;
  double theta;
  double rope_factor;  // 0: no llama3 scaling
  bool tied;
};

// config.json of each published model (REFERENCE.md).
constexpr Preset kPresets[] = {
    {"llama-3.2-1b", 128256, 2048, 8192, 16, 32, 8, 131072, 500000.0, 32.0, true},
    {"llama-3.2-3b", 128256, 3072, 8192, 28, 24, 8, 131072, 500000.0, 32.0, true},
    {"llama-3.1-8b", 128256, 4096, 14336, 32, 32, 8, 131072, 500000.0, 8.0, false},
    {"llama-2-7b", 32000, 4096, 11008, 32, 32, 32, 4096, 10000.0, 0.0, false},
    {"llama-2-13b", 32000, 5120, 13824, 40, 40, 40, 4096, 10000.0, 0.0, false},
    {"llama-3.1-70b", 128256, 8192, 28672, 80, 64, 8, 131072, 500000.0, 8.0, false},
};

}  // namespace

std::vector<std::string> llama_preset_names() {
  std::vector<std::string> out;
  for (const Preset& p : kPresets) out.emplace_back(p.name);
  return out;
}

Result<LlamaConfig> llama_preset(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    LlamaConfig c;
    c.vocab = p.vocab;
    c.channels = p.channels;
    c.intermediate = p.intermediate;
    c.layers = p.layers;
    c.heads = p.heads;
    c.kv_heads = p.kv_heads;
    c.max_seq = p.max_seq;
    c.rms_eps = 1e-5;
    c.rope_theta = p.theta;
    if (p.rope_factor > 0) {
      c.rope_scaling = Llama3RopeScaling{true, p.rope_factor, 1.0, 4.0, 8192};
    }
    c.tied = p.tied;
    c.dtype = DType::kBF16;
    return c;
  }
  std::string known;
  for (const Preset& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  return make_error(ErrorCode::kConfig, "llama preset \"", name, "\" is not known (", known, ")");
}

}  // namespace strata::model
