#include "base/bytes.h"

#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "base/error.h"

namespace zero {

std::string format_bytes(std::uint64_t bytes) {
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

std::uint64_t parse_bytes(const std::string& text, const char* what) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || !(value >= 0) || !std::isfinite(value)) {
    throw make_error(ErrorCategory::usage,
                     "{} '{}' is not a size; write e.g. 80GiB, 1.5TB, 512MiB or a number of bytes",
                     what, text);
  }
  const std::string unit = text.substr(used);
  static const std::pair<const char*, double> kScales[] = {{"", 1},
                                                           {"B", 1},
                                                           {"K", 1e3},
                                                           {"KB", 1e3},
                                                           {"KiB", 1024.0},
                                                           {"M", 1e6},
                                                           {"MB", 1e6},
                                                           {"MiB", 1048576.0},
                                                           {"G", 1e9},
                                                           {"GB", 1e9},
                                                           {"GiB", 1073741824.0},
                                                           {"T", 1e12},
                                                           {"TB", 1e12},
                                                           {"TiB", 1099511627776.0}};
  for (const auto& [name, scale] : kScales) {
    if (unit == name) return static_cast<std::uint64_t>(std::llround(value * scale));
  }
  throw make_error(ErrorCategory::usage,
                   "{} '{}': unknown unit '{}'; use B, KB, MB, GB, TB (powers of 1000) or KiB, "
                   "MiB, GiB, TiB",
                   what, text, unit);
}

}  // namespace zero
