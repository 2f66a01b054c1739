// Helpers shared by the benchmarks under bench/: wall-clock seconds and the median of repeats.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "core/median.h"
#include "core/status.h"

namespace strata::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

using strata::median;  // of the repeats (core/median.h)

// For benchmarks that cannot go on after an error: print "NAME: error" and exit 1.
[[noreturn]] inline void die(const char* name, const Status& st) {
  std::fprintf(stderr, "%s: %s\n", name, st.to_string().c_str());
  std::exit(1);
}
inline void check(const char* name, const Status& st) {
  if (!st.ok()) die(name, st);
}
template <typename T>
T check(const char* name, Result<T> r) {
  if (!r.ok()) die(name, r.status());
  return std::move(r).value();
}

}  // namespace strata::bench

// Defines check(Result<T>) and check(Status) for a benchmark named `name`, at namespace scope.
#define STRATA_BENCH_CHECKS(name)                      \
  template <typename T>                                \
  T check(::strata::Result<T> r) {                     \
    return ::strata::bench::check(name, std::move(r)); \
  }                                                    \
  [[maybe_unused]] void check(const ::strata::Status& st) { ::strata::bench::check(name, st); }
