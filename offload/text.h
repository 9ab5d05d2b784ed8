// Text for the messages of offload/: errno descriptions (byte counts: base/bytes.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "base/bytes.h"

namespace zero::offload::detail {

// strerror, thread-safe: several rings and threads report failures at once.
inline std::string errno_text(int err) {
  char buffer[256];
  return ::strerror_r(err, buffer, sizeof buffer);  // the GNU strerror_r returns the text
}

}  // namespace zero::offload::detail
