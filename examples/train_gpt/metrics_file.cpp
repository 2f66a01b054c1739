#include "metrics_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/replace_file.h"

namespace strata::train_gpt {

Result<int64_t> trim_metrics(const std::string& path, int64_t last_step) {
  std::ifstream in(path);
  if (!in) return int64_t{0};
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return int64_t{0};  // /dev/null, a pipe
  // A symbolic link: its target is rewritten (the link stays a link).
  const std::string target = std::filesystem::canonical(path, ec).string();
  if (ec) return make_error(ErrorCode::kIo, "--metrics ", path, ": ", ec.message());
  std::string kept, line;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<int64_t>() > last_step) {
      ++dropped;
      continue;
    }
    kept += line + '\n';
  }
  if (dropped == 0) return int64_t{0};
  const std::string what = "--metrics " + path;
  STRATA_RETURN_IF_ERROR(model::write_replacing(target, what, /*sync=*/true, [&](int fd) {
    return model::write_all(fd, kept.data(), kept.size(), what);
  }));
  return dropped;
}

void say_trimmed(const std::string& path, int64_t last_step, int64_t dropped) {
  std::printf(
      "metrics: %lld records after step %lld dropped from %s (this run writes them again)\n",
      static_cast<long long>(dropped), static_cast<long long>(last_step), path.c_str());
}

Status MetricsFile::open(const std::string& path, bool resuming, int64_t resumed_step) {
  if (path.empty()) return ok_status();
  if (resuming) {
    STRATA_ASSIGN_OR_RETURN(const int64_t dropped, trim_metrics(path, resumed_step));
    if (dropped > 0) say_trimmed(path, resumed_step, dropped);
  }
  out_.open(path, resuming ? std::ios::app : std::ios::trunc);
  if (!out_) return make_error(ErrorCode::kIo, "--metrics ", path, ": cannot create the file");
  return ok_status();
}

}  // namespace strata::train_gpt
