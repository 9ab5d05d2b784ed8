// Lenient JSON reading for configs (see json_text.h).
#include "config/json_text.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/error.h"

namespace zero::config {
namespace {

using json = nlohmann::ordered_json;

// Tracks the keys of each open object while nlohmann parses, to find the first duplicate.
class DuplicateKeyFinder {
 public:
  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        frames_.push_back({true, {}, {}, 0});
        break;
      case json::parse_event_t::array_start:
        frames_.push_back({false, {}, {}, 0});
        break;
      case json::parse_event_t::key: {
        Frame& frame = frames_.back();
        const std::string key = parsed.get<std::string>();
        for (const auto& seen : frame.keys) {
          if (seen == key && duplicate_.empty()) duplicate_ = path_with(key);
        }
        frame.keys.push_back(key);
        frame.current_key = key;
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        advance_array_index();
        break;
      case json::parse_event_t::value:
        advance_array_index();
        break;
    }
    (void)depth;
    return true;
  }

  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    bool is_object;
    std::vector<std::string> keys;
    std::string current_key;
    std::size_t index;
  };

  void advance_array_index() {
    if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().index;
  }

  std::string path_with(const std::string& key) const {
    std::string path;
    for (std::size_t i = 0; i + 1 < frames_.size(); ++i) {
      const Frame& frame = frames_[i];
      if (frame.is_object) {
        path += (path.empty() ? "" : ".") + frame.current_key;
      } else {
        path += "[" + std::to_string(frame.index) + "]";
      }
    }
    return path.empty() ? key : path + "." + key;
  }

  std::vector<Frame> frames_;
  std::string duplicate_;
};

}  // namespace

TextPosition position_of(std::string_view text, std::size_t offset) {
  TextPosition position{1, 1};
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++position.line;
      position.column = 1;
    } else {
      ++position.column;
    }
  }
  return position;
}

json parse_json_text(std::string_view text, const std::string& source) {
  auto finder = std::make_shared<DuplicateKeyFinder>();
  json document;
  try {
    document = json::parse(
        text.begin(), text.end(),
        [finder](int depth, json::parse_event_t event, json& parsed) {
          return (*finder)(depth, event, parsed);
        },
        /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& error) {
    // nlohmann's byte is 1-based and points just past the offending character.
    const std::size_t offset = error.byte > 0 ? error.byte - 1 : 0;
    const TextPosition at = position_of(text, offset);
    std::string what = error.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 3, column 5: ".
    if (const auto colon = what.find(": "); colon != std::string::npos) {
      what = what.substr(colon + 2);
    }
    throw make_error(ErrorCategory::config, "{}:{}:{}: malformed JSON: {}", source, at.line,
                     at.column, what);
  } catch (const json::exception& error) {
    // Number overflow (out_of_range.406) carries no position: find the number in the text.
    std::string what = error.what();
    if (const auto colon = what.find("] "); colon != std::string::npos)
      what = what.substr(colon + 2);
    std::string where = source;
    if (const auto open = what.find('\''), close = what.rfind('\'');
        open != std::string::npos && close > open) {
      const auto offset = text.find(what.substr(open + 1, close - open - 1));
      if (offset != std::string_view::npos) {
        const TextPosition at = position_of(text, offset);
        where = fmt::format("{}:{}:{}", source, at.line, at.column);
      }
    }
    throw make_error(ErrorCategory::config, "{}: malformed JSON: {}", where, what);
  }
  if (!finder->duplicate().empty()) {
    throw make_error(ErrorCategory::config,
                     "{}: duplicate key {} (given twice in one object; keep one)", source,
                     finder->duplicate());
  }
  return document;
}

json read_json_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    const int err = errno;
    throw make_error(ErrorCategory::io, "cannot read config file {}: {}", path, std::strerror(err));
  }
  std::ostringstream contents;
  contents << file.rdbuf();
  return parse_json_text(contents.str(), path);
}

}  // namespace zero::config
