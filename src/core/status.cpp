#include "core/status.h"

#include "core/check.h"

namespace strata {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kConfig: return "config";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kOutOfMemory: return "out-of-memory";
    case ErrorCode::kComm: return "comm";
    case ErrorCode::kCuda: return "cuda";
    case ErrorCode::kCorrupt: return "corrupt";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s(error_code_name(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

namespace detail {
void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  std::fprintf(stderr, "strata: check failed at %s:%d: %s%s%s\n", file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

}  // namespace strata
