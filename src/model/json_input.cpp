#include "model/json_input.h"

#include <set>
#include <vector>

namespace strata::model {

using nlohmann::json;

Result<json> parse_json_input(const std::string& text, const std::string& what) {
  // The keys of each object being parsed, innermost last, and their paths.
  std::vector<std::set<std::string>> keys;
  std::vector<std::string> path;
  std::string last_key, duplicate;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        path.push_back(keys.empty() ? std::string() : last_key);
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        path.pop_back();
        break;
      case json::parse_event_t::key:
        last_key = parsed.get<std::string>();
        if (!keys.back().insert(last_key).second && duplicate.empty()) {
          std::string where;
          for (const std::string& p : path) {
            if (!p.empty()) where += p + ".";
          }
          duplicate = where + last_key;
        }
        break;
      default: break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, callback);
  } catch (const json::exception& e) {
    return make_error(ErrorCode::kCorrupt, what, ": not JSON (", e.what(), ")");
  }
  if (!duplicate.empty()) {
    return make_error(ErrorCode::kCorrupt, what, ": the key ", duplicate,
                      " is given twice (each key once)");
  }
  return j;
}

Result<json> read_json_input(const std::string& path, const std::string& what,
                             const InputRead& how) {
  STRATA_ASSIGN_OR_RETURN(const std::string text, read_input_file(path, what, how));
  return parse_json_input(text, what);
}

}  // namespace strata::model
