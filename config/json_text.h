// Reading config text into JSON the way DeepSpeed users write it: `//` and `/* */` comments
// are allowed, a malformed document is reported with its line and column, and a key given
// twice in one object is refused (nlohmann/json would silently keep the last).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace zero::config {

// Parses `text`; `source` names it in messages (a file path or "<string>"). Throws a config
// Error: "<source>:<line>:<column>: malformed JSON: <what>" or
// "<source>: duplicate key <path> (given twice in one object)".
nlohmann::ordered_json parse_json_text(std::string_view text, const std::string& source);

// Reads and parses a file; an unreadable file is an io Error naming the path and errno.
nlohmann::ordered_json read_json_file(const std::string& path);

// 1-based line and column of byte `offset` in `text`.
struct TextPosition {
  std::size_t line;
  std::size_t column;
};
TextPosition position_of(std::string_view text, std::size_t offset);

}  // namespace zero::config
