// A launcher's environment from a map of names to values, for the tests of comm/launch and
// comm/start_watch.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "comm/launch.h"

namespace zero::testing {

inline comm::Environment fake_environment(std::map<std::string, std::string> values) {
  return [values = std::move(values)](std::string_view name) -> std::optional<std::string> {
    const auto it = values.find(std::string(name));
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace zero::testing
