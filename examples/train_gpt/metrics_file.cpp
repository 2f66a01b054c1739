#include "metrics_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/interrupt.h"

namespace strata::train_gpt {

Status trim_metrics(const std::string& path, int64_t last_step) {
  std::ifstream in(path);
  if (!in) return ok_status();
  const std::string tmp = path + ".tmp";
  const CleanupPath cleanup(tmp);
  std::ofstream out(tmp, std::ios::trunc);
  if (!out) return make_error(ErrorCode::kIo, "--metrics ", path, ": cannot create ", tmp);
  std::string line;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<int64_t>() > last_step) {
      ++dropped;
      continue;
    }
    out << line << '\n';
  }
  out.close();
  if (!out) {
    std::remove(tmp.c_str());
    return make_error(ErrorCode::kIo, "--metrics ", path, ": cannot write ", tmp);
  }
  if (dropped == 0) {
    std::remove(tmp.c_str());
    return ok_status();
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return make_error(ErrorCode::kIo, "--metrics ", path, ": cannot replace: ", ec.message());
  }
  return ok_status();
}

}  // namespace strata::train_gpt
