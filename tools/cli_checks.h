// Range checks for the tools' numeric options, with messages a person can read: "--steps:
// must be at least 1 (got 0)" instead of CLI11's ranges spelt out to 1.8e308.
#pragma once

#include <cmath>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace zero::tools {

namespace detail {

// The value's text as a finite number, or an error text.
inline std::string as_number(const std::string& text, double& value) {
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || !std::isfinite(value)) {
    return fmt::format("'{}' is not a number", text);
  }
  return {};
}

// 16777216 for whole numbers below 1e9, else 1e+15 and 0.5.
inline std::string number_text(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e9) return fmt::format("{:.0f}", value);
  return fmt::format("{:g}", value);
}

}  // namespace detail

// value >= min
inline CLI::Validator at_least(double min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        double value = 0;
        if (std::string e = detail::as_number(text, value); !e.empty()) return e;
        if (value < min) {
          return fmt::format("must be at least {} (got {})", detail::number_text(min), text);
        }
        return {};
      },
      ">= " + detail::number_text(min));
}

// value > min
inline CLI::Validator above(double min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        double value = 0;
        if (std::string e = detail::as_number(text, value); !e.empty()) return e;
        if (!(value > min)) {
          return fmt::format("must be above {} (got {})", detail::number_text(min), text);
        }
        return {};
      },
      "> " + detail::number_text(min));
}

// min <= value <= max
inline CLI::Validator between(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        double value = 0;
        if (std::string e = detail::as_number(text, value); !e.empty()) return e;
        if (value < min || value > max) {
          return fmt::format("must be between {} and {} (got {})", detail::number_text(min),
                             detail::number_text(max), text);
        }
        return {};
      },
      detail::number_text(min) + " to " + detail::number_text(max));
}

}  // namespace zero::tools
