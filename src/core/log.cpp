#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace strata {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("STRATA_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kInfo;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(v, "warn") == 0) return LogLevel::kWarn;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& level_slot() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

std::mutex& log_mutex() {
  static std::mutex m;
  return m;
}

const char* level_tag(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warning";
    case LogLevel::kError: return "error";
  }
  return "?";
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_slot().load(std::memory_order_relaxed)); }
void set_log_level(LogLevel level) { level_slot().store(static_cast<int>(level)); }
bool log_enabled(LogLevel level) {
  return static_cast<int>(level) >= static_cast<int>(log_level());
}

void log_write(LogLevel level, std::string_view message) {
  std::lock_guard<std::mutex> lock(log_mutex());
  std::fprintf(stderr, "strata %s: %.*s\n", level_tag(level), static_cast<int>(message.size()),
               message.data());
}

}  // namespace strata
