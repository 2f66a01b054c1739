// The DeepSpeed keys train_gpt knows (ds_config.h): the keys acted on and their handlers, the
// keys accepted and ignored with the reason, DeepSpeed's aliases, the sections ignored whole, and
// Hugging Face's "auto" values.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "ds_config.h"
#include "flags.h"

namespace strata::train_gpt::ds {

using json = nlohmann::json;

// What a key's handler needs: where it is (for messages) and the shared state.
struct Ctx {
  Flags& f;
  ConfigDeferred& d;
  ConfigReport& report;
  const std::function<bool(const std::string&)>& given;
  std::string key;    // the dotted path of the key being read
  std::string sched;  // scheduler.type
  std::string nvme;   // the nvme_path seen first, and from which key
  std::string nvme_key;
  double cos_min_ratio = -1.0;
  int64_t reduce_bucket = -1;  // elements
  // The batch keys as given (-1: absent; "auto" filled in counts as given).
  int64_t micro = -1, accum = -1, global = -1;
  bool adam_w_mode = true;  // optimizer.params.adam_w_mode

  // "key = value is not accepted (accepted)".
  Status bad(const json& value, const std::string& accepted) const;
  void fill(const std::string& key_path, const json& value, const std::string& why) const;
  // `flag` was set from the key being read (Flags::config_keys).
  void set_by(const std::string& flag) const { f.config_keys[flag] = key; }
  // Flags::*field = value unless `flag` was given on the command line (it then keeps its value),
  // recorded as set by the key being read.
  template <typename T, typename V>
  void set(const std::string& flag, T Flags::*field, const V& value) const {
    if (given(flag)) return;
    f.*field = static_cast<T>(value);
    set_by(flag);
  }
};

using Handler = std::function<Status(const json&, Ctx&)>;

// optimizer.type in lower case ("" when it is not a string): DeepSpeed's names are
// case-insensitive.
std::string optimizer_type(const json& type);

// Keys acted on, by dotted path.
const std::map<std::string, Handler>& handlers();

// A key accepted and ignored: always, or only with the values `harmless` holds (others are
// refused with `refusal`).
struct Ignored {
  std::string why;
  std::function<bool(const json&)> harmless;  // null: any value
  std::string refusal;
};
const std::map<std::string, Ignored>& ignored_keys();
// Top-level sections ignored whole (logging, profiling, tuning), with the reason.
const std::map<std::string, std::string>& ignored_sections();
// DeepSpeed's aliases: the alias's dotted path and the key it stands for.
const std::map<std::string, std::string>& aliases();
// Sections whose unknown keys DeepSpeed refuses.
bool validated_section(const std::string& path);

// The value Hugging Face's integration puts for "auto" at `path` (a Trainer with default
// arguments), with its reason; nothing where it fills in none (then "auto" is refused).
struct AutoValue {
  json value;
  std::string why;
};
std::optional<AutoValue> hf_auto(const std::string& path, const Flags& f);

// Objects that hold known keys (every prefix of a handled or ignored key).
bool is_object_path(const std::string& path);
// The known key nearest to `path` when it is close (a typo), else empty.
std::string close_key(const std::string& path);

}  // namespace strata::train_gpt::ds
