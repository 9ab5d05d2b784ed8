// Status codes, their names, the per-thread last error and the version entry points.
#include "engine/api/c_status.h"

#include "base/version.h"

namespace zero {
namespace {

thread_local std::string last_error;

}  // namespace

zero_status status_of(ErrorCategory category) noexcept {
  switch (category) {
    case ErrorCategory::config:
      return ZERO_ERROR_CONFIG;
    case ErrorCategory::usage:
      return ZERO_ERROR_USAGE;
    case ErrorCategory::comm:
      return ZERO_ERROR_COMM;
    case ErrorCategory::timeout:
      return ZERO_ERROR_TIMEOUT;
    case ErrorCategory::io:
      return ZERO_ERROR_IO;
    case ErrorCategory::device:
      return ZERO_ERROR_DEVICE;
    case ErrorCategory::out_of_memory:
      return ZERO_ERROR_OUT_OF_MEMORY;
    case ErrorCategory::internal:
      return ZERO_ERROR_INTERNAL;
  }
  return ZERO_ERROR_INTERNAL;
}

zero_status set_last_error(zero_status status, const std::string& message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();  // could not copy the message: keep the status at least
  }
  return status;
}

}  // namespace zero

extern "C" {

const char* zero_status_string(zero_status status) {
  switch (status) {
    case ZERO_OK:
      return "ok";
    case ZERO_ERROR_CONFIG:
      return "config error";
    case ZERO_ERROR_USAGE:
      return "usage error";
    case ZERO_ERROR_COMM:
      return "communication error";
    case ZERO_ERROR_TIMEOUT:
      return "timeout";
    case ZERO_ERROR_IO:
      return "I/O error";
    case ZERO_ERROR_DEVICE:
      return "device error";
    case ZERO_ERROR_OUT_OF_MEMORY:
      return "out of memory";
    case ZERO_ERROR_INTERNAL:
      return "internal error";
  }
  return "unknown status";
}

const char* zero_last_error(void) {
  return zero::last_error.c_str();
}

const char* zero_version(void) {
  return ZERO_BUILD_VERSION_STRING;
}

int zero_version_code(void) {
  return ZERO_VERSION_CODE;
}

}  // extern "C"
