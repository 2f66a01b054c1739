// Invariant checks: a broken invariant (a bug, never bad input) aborts with file:line.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace strata::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* expr,
                               const std::string& msg);
}  // namespace strata::detail

// STRATA_CHECK(cond) or STRATA_CHECK(cond, "message " << value): abort with file:line when false.
#define STRATA_CHECK(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] {                                                          \
      std::ostringstream strata_check_os_;                                               \
      strata_check_os_ << "" __VA_OPT__(<< __VA_ARGS__);                                 \
      ::strata::detail::check_failed(__FILE__, __LINE__, #cond, strata_check_os_.str()); \
    }                                                                                    \
  } while (0)

// Aborts if a Status that must succeed (a bug otherwise) is not ok.
#define STRATA_CHECK_OK(expr)                                                  \
  do {                                                                         \
    ::strata::Status strata_check_status_ = (expr);                            \
    STRATA_CHECK(strata_check_status_.ok(), strata_check_status_.to_string()); \
  } while (0)
