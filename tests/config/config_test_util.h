// Helpers for the config tests: read a config text, or get the error it raises.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "base/error.h"
#include "config/config.h"

namespace zero::config::test {

inline Config read(const std::string& text, int world_size = 1,
                   const std::vector<std::string>& sets = {}) {
  ReadOptions options;
  options.world_size = world_size;
  for (const auto& assignment : sets) options.overrides.push_back(parse_override(assignment));
  return read_config_text(text, options);
}

// The message of the config Error `text` raises; fails the test when it raises none.
inline std::string error_of(const std::string& text, int world_size = 1,
                            const std::vector<std::string>& sets = {}) {
  try {
    read(text, world_size, sets);
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::config);
    return error.what();
  }
  FAIL("expected a config error for: " << text);
  return {};
}

inline const ResolvedValue& resolved(const Config& config, const std::string& path) {
  for (const auto& value : config.resolved) {
    if (value.path == path) return value;
  }
  FAIL("no resolved value for " << path);
  throw;  // unreachable
}

inline bool has_line(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& line : lines) {
    if (line == text) return true;
  }
  return false;
}

}  // namespace zero::config::test
