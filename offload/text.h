// Text for the messages of offload/: byte counts for people and errno descriptions.
// (device/ formats arena sizes the same way; offload/ depends on base/ only.)
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace zero::offload::detail {

inline std::string human_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

// strerror, thread-safe: several rings and threads report failures at once.
inline std::string errno_text(int err) {
  char buffer[256];
  return ::strerror_r(err, buffer, sizeof buffer);  // the GNU strerror_r returns the text
}

}  // namespace zero::offload::detail
