// Llama shapes (model/llama_config.h):
//   - the presets have the published parameter counts (Meta's model cards: 1.24B, 3.21B, 8.03B,
//     6.74B, 13.0B, 70.6B) and config.json's fields;
//   - a Hugging Face config.json (Llama 3.1 8B's, as published) reads with every field, and what
//     strata writes reads back the same;
//   - what would change the maths is refused naming the field;
//   - the rotary frequencies follow Hugging Face's llama3 rule (written out here in float64).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "model/llama_config.h"

namespace strata::model {
namespace {

TEST(LlamaConfig, PresetsHaveThePublishedSizes) {
  const std::pair<const char*, double> published[] = {
      {"llama-3.2-1b", 1.24e9}, {"llama-3.2-3b", 3.21e9}, {"llama-3.1-8b", 8.03e9},
      {"llama-2-7b", 6.74e9},   {"llama-2-13b", 13.02e9}, {"llama-3.1-70b", 70.55e9}};
  ASSERT_EQ(llama_preset_names().size(), std::size(published));
  for (const auto& [name, params] : published) {
    auto c = llama_preset(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_TRUE(c.value().validate().ok()) << name;
    EXPECT_NEAR(static_cast<double>(c.value().num_params()) / params, 1.0, 0.006) << name;
  }
  const auto unknown = llama_preset("llama-4");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("llama-3.1-8b"), std::string::npos);
}

constexpr const char* kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

TEST(LlamaConfig, ReadsHuggingFacesConfigAndWritesItBack) {
  auto c = parse_hf_llama_config(kLlama31_8B, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const LlamaConfig& l = c.value();
  EXPECT_EQ(l.vocab, 128256);
  EXPECT_EQ(l.channels, 4096);
  EXPECT_EQ(l.intermediate, 14336);
  EXPECT_EQ(l.layers, 32);
  EXPECT_EQ(l.heads, 32);
  EXPECT_EQ(l.kv_heads, 8);
  EXPECT_EQ(l.max_seq, 131072);
  EXPECT_EQ(l.rms_eps, 1e-5);
  EXPECT_EQ(l.rope_theta, 500000.0);
  EXPECT_TRUE(l.rope_scaling.enabled);
  EXPECT_EQ(l.rope_scaling.factor, 8.0);
  EXPECT_EQ(l.rope_scaling.original_max_position, 8192);
  EXPECT_FALSE(l.tied);
  auto preset = llama_preset("llama-3.1-8b").value();
  EXPECT_EQ(l.num_params(), preset.num_params());
  auto back = parse_hf_llama_config(hf_llama_config_json(l), "written");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(hf_llama_config_json(back.value()), hf_llama_config_json(l));
  // Defaults: no num_key_value_heads means multi-head; no tie_word_embeddings means untied.
  auto mha = parse_hf_llama_config(R"({"model_type": "llama", "vocab_size": 100,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4})",
                                   "small");
  ASSERT_TRUE(mha.ok()) << mha.status().to_string();
  EXPECT_EQ(mha.value().kv_heads, 4);
  EXPECT_FALSE(mha.value().tied);
  EXPECT_FALSE(mha.value().rope_scaling.enabled);
}

TEST(LlamaConfig, RefusesWhatWouldChangeTheMathsNamingTheField) {
  const std::string base = kLlama31_8B;
  auto with = [&](const std::string& key, const std::string& value) {
    const auto at = base.find("\"" + key + "\"");
    std::string text = base;
    if (at == std::string::npos) {
      text.insert(1, "\"" + key + "\": " + value + ", ");
    } else {
      const auto colon = text.find(':', at);
      auto end = colon + 1;
      int depth = 0;
      for (; end < text.size(); ++end) {
        const char ch = text[end];
        if (ch == '{' || ch == '[') ++depth;
        if (ch == '}' || ch == ']') {
          if (depth == 0) break;
          --depth;
        }
        if (ch == ',' && depth == 0) break;
      }
      text.replace(colon + 1, end - colon - 1, " " + value);
    }
    return parse_hf_llama_config(text, "config.json");
  };
  const std::pair<std::string, std::string> bad[] = {
      {"attention_bias", "true"},
      {"mlp_bias", "true"},
      {"hidden_act", "\"gelu\""},
      {"head_dim", "64"},
      {"attention_dropout", "0.1"},
      {"rope_scaling", R"({"type": "linear", "factor": 2.0})"},
      {"num_key_value_heads", "5"},
      {"model_type", "\"mistral\""},
      {"vocab_size", "\"big\""},
      // Mistyped fields (not read as off) and sizes past their bounds, refused before anything
      // is sized by them (issue 47).
      {"attention_bias", "\"true\""},
      {"mlp_bias", "1"},
      {"attention_dropout", "\"0.1\""},
      {"rms_norm_eps", "1e300"},
      {"num_hidden_layers", "100000000"},
      {"num_hidden_layers", "1099511627776"},
      {"hidden_size", "4194304"},
      {"intermediate_size", "4194304"},
      {"max_position_embeddings", "1099511627776"},
      {"vocab_size", "4294967296"},
      {"rope_scaling", R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 1e300})"},
  };
  for (const auto& [key, value] : bad) {
    auto c = with(key, value);
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_EQ(c.status().message().rfind("config.json: ", 0), 0u) << c.status().message();
    EXPECT_NE(c.status().message().find(key), std::string::npos) << c.status().message();
  }
  EXPECT_FALSE(parse_hf_llama_config("{", "config.json").ok());
  // A key given twice.
  auto twice = parse_hf_llama_config(base.substr(0, base.size() - 1) + R"(, "hidden_size": 64})",
                                     "config.json");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("hidden_size is given twice"), std::string::npos)
      << twice.status().message();
  // Within each bound, a model past the parameter bound (2^42) is refused too.
  auto many = with("hidden_size", "1048576");
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("parameter count"), std::string::npos)
      << many.status().message();
}

// Hugging Face's _compute_llama3_parameters, written out again in float64.
TEST(LlamaConfig, RotaryFrequenciesFollowTheLlama3Rule) {
  const LlamaConfig c = llama_preset("llama-3.1-8b").value();
  const std::vector<float> f = c.inv_freq();
  ASSERT_EQ(f.size(), 64u);
  int low = 0, mid = 0, high = 0;
  for (int i = 0; i < 64; ++i) {
    const double base = 1.0 / std::pow(500000.0, (2.0 * i) / 128.0);
    const double wavelen = 2 * std::numbers::pi / base;
    double want = base;
    if (wavelen > 8192.0 / 1.0) {
      want = base / 8.0;
      ++low;
    } else if (wavelen < 8192.0 / 4.0) {
      ++high;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * base / 8.0 + smooth * base;
      ++mid;
    }
    EXPECT_EQ(f[i], static_cast<float>(want)) << i;
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_GT(high, 0);
  const std::vector<float> plain = llama_preset("llama-2-7b").value().inv_freq();
  EXPECT_EQ(plain[0], 1.0f);
  EXPECT_EQ(plain[1], static_cast<float>(std::pow(10000.0, -2.0 / 128.0)));
}

}  // namespace
}  // namespace strata::model
