// The C shim's one rule: run a body, turn any exception into a zero_status and the thread's
// last-error message. Every zero_* function is `return zero::guard([&] { ... });`.
#pragma once

#include <string>

#include "base/error.h"
#include "zero/zero.h"

namespace zero {

zero_status status_of(ErrorCategory category) noexcept;

// Records `message` as this thread's last error and returns `status`.
zero_status set_last_error(zero_status status, const std::string& message) noexcept;

template <typename Body>
zero_status guard(Body&& body) noexcept {
  try {
    body();
    return ZERO_OK;
  } catch (const Error& error) {
    return set_last_error(status_of(error.category()), error.what());
  } catch (const std::bad_alloc&) {
    return set_last_error(ZERO_ERROR_OUT_OF_MEMORY, "out of host memory (std::bad_alloc)");
  } catch (const std::exception& error) {
    return set_last_error(ZERO_ERROR_INTERNAL,
                          std::string("unexpected exception: ") + error.what());
  } catch (...) {
    return set_last_error(ZERO_ERROR_INTERNAL, "unexpected exception of unknown type");
  }
}

}  // namespace zero
