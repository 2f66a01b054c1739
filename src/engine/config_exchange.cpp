#include "engine/config_exchange.h"

#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace strata::engine {

namespace {
// Enums travel as their underlying integers, an unset optional as null.
template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};

template <typename T>
nlohmann::json to_value(const T& v) {
  if constexpr (IsOptional<T>::value) {
    return v ? to_value(*v) : nlohmann::json();
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<std::underlying_type_t<T>>(v);
  } else {
    return v;
  }
}
template <typename T>
T from_value(const nlohmann::json& j) {
  if constexpr (IsOptional<T>::value) {
    if (j.is_null()) return std::nullopt;
    return from_value<typename T::value_type>(j);
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<T>(j.get<std::underlying_type_t<T>>());
  } else {
    return j.get<T>();
  }
}
}  // namespace

nlohmann::json config_to_json(const EngineConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  visit_fields(config, [&j](Field field, const auto& v) {
    j[std::string(field_name(field))] = to_value(v);
  });
  return j;
}

Result<EngineConfig> config_from_json(const nlohmann::json& j) {
  EngineConfig c;
  std::string_view bad;
  visit_fields(c, [&](Field field, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if (!bad.empty()) return;
    try {
      v = from_value<T>(j.at(std::string(field_name(field))));
    } catch (const nlohmann::json::exception&) {
      bad = field_name(field);
    }
  });
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
