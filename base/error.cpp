// Names of the error categories, as they appear in messages and in zero_status_string.
#include "base/error.h"

#include <cstring>

namespace zero {

std::string errno_text(int err) {
  char buffer[256];
  return ::strerror_r(err, buffer, sizeof buffer);  // the GNU strerror_r returns the text
}

std::string_view category_name(ErrorCategory category) noexcept {
  switch (category) {
    case ErrorCategory::config:
      return "config error";
    case ErrorCategory::usage:
      return "usage error";
    case ErrorCategory::comm:
      return "communication error";
    case ErrorCategory::timeout:
      return "timeout";
    case ErrorCategory::io:
      return "I/O error";
    case ErrorCategory::device:
      return "device error";
    case ErrorCategory::out_of_memory:
      return "out of memory";
    case ErrorCategory::internal:
      return "internal error";
  }
  return "unknown error";
}

}  // namespace zero
