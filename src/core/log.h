// Logging with levels. The level comes from STRATA_LOG_LEVEL (debug|info|warn|error, default
// info) or set_log_level(). Thread-safe: each message is written whole under a lock, to stderr.
#pragma once

#include <sstream>
#include <string_view>

namespace strata {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_write(LogLevel level, std::string_view message);

}  // namespace strata

// STRATA_LOG(kInfo, "pinned " << bytes << " bytes");
#define STRATA_LOG(level, expr)                                             \
  do {                                                                      \
    if (::strata::log_enabled(::strata::LogLevel::level)) {                 \
      std::ostringstream strata_log_os_;                                    \
      strata_log_os_ << expr;                                               \
      ::strata::log_write(::strata::LogLevel::level, strata_log_os_.str()); \
    }                                                                       \
  } while (0)
