// Status and Result<T>: errors as values across module APIs (DESIGN.md §6).
// Thread safety: values; no shared state.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace strata {

enum class ErrorCode {
  kOk = 0,
  kConfig,       // a flag, config key or argument has a value that is not accepted
  kIo,           // file or device I/O failed (errno, io_uring)
  kOutOfMemory,  // an allocation over a cap or refused by the OS / driver
  kComm,         // MPI / NCCL failure, mismatch across ranks, peer failure
  kCuda,         // CUDA runtime / driver / cuBLAS failure
  kCorrupt,      // data failed a check (checksum, magic, size)
  kUnsupported,  // the request is valid but not available here
  kInternal,     // a bug: a broken invariant that was reported instead of aborting
};

std::string_view error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "category: message", or "ok".
  std::string to_string() const;

  // Returns a copy with `context` prefixed to the message ("context: message").
  Status with_context(std::string_view context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }

// Builds a message from stream pieces: make_error(ErrorCode::kConfig, "x ", v, " is not ...").
template <typename... Args>
Status make_error(ErrorCode code, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return Status(code, os.str());
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) {
      v_ = Status(ErrorCode::kInternal, "Result constructed from an ok Status without a value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return checked(); }
  const T& value() const& { return const_cast<Result*>(this)->checked(); }
  T&& value() && { return std::move(checked()); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &const_cast<Result*>(this)->checked(); }
  T& operator*() & { return checked(); }

 private:
  T& checked() {
    if (!ok()) {
      std::fprintf(stderr, "strata: value() of a failed Result: %s\n",
                   std::get<Status>(v_).to_string().c_str());
      std::abort();
    }
    return std::get<T>(v_);
  }
  std::variant<T, Status> v_;
};

}  // namespace strata

#define STRATA_CONCAT_INNER(a, b) a##b
#define STRATA_CONCAT(a, b) STRATA_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not ok.
#define STRATA_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::strata::Status strata_status_ = (expr);        \
    if (!strata_status_.ok()) return strata_status_; \
  } while (0)

// `lhs = value of expr` or return its Status: STRATA_ASSIGN_OR_RETURN(auto x, make_x());
#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL(STRATA_CONCAT(strata_result_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
