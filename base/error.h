// The one error model of zero: every failure inside the library is a zero::Error with a
// category (what kind of failure, which becomes the C API's zero_status) and a message that
// says what failed, where, and what to do about it. The C shim turns these into status codes.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace zero {

enum class ErrorCategory {
  config,         // a config key, value or combination is wrong
  usage,          // the caller broke an API contract (order of calls, bad argument)
  comm,           // a collective or the communicator failed
  timeout,        // something did not complete in time
  io,             // a file or disk operation failed
  device,         // the accelerator runtime or a device operation failed
  out_of_memory,  // an arena or the system ran out of memory
  internal,       // a bug in zero
};

std::string_view category_name(ErrorCategory category) noexcept;

// strerror's text for an errno value, thread-safe (I/O threads report failures at once).
std::string errno_text(int err);

class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, const std::string& message)
      : std::runtime_error(message), category_(category) {}

  ErrorCategory category() const noexcept { return category_; }

 private:
  ErrorCategory category_;
};

// Builds an Error with a fmt-style message: `throw make_error(ErrorCategory::io, "...{}", x);`
template <typename... Args>
Error make_error(ErrorCategory category, fmt::format_string<Args...> format, Args&&... args) {
  return Error(category, fmt::format(format, std::forward<Args>(args)...));
}

// Throws an internal error naming the source location when `condition` is false. For
// invariants of our own code only; input and I/O results are checked with real errors.
#define ZERO_CHECK(condition, ...)                                                          \
  do {                                                                                      \
    if (!(condition)) {                                                                     \
      throw ::zero::Error(::zero::ErrorCategory::internal,                                  \
                          ::fmt::format("internal check failed at {}:{}: {}: {}", __FILE__, \
                                        __LINE__, #condition, ::fmt::format(__VA_ARGS__))); \
    }                                                                                       \
  } while (0)

}  // namespace zero
