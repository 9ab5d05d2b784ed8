// The "zero" logger: stderr sink, rank-tagged pattern, level from the rank or ZERO_LOG_LEVEL.
#include "base/log.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace zero::log {
namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto result = std::make_shared<spdlog::logger>("zero", std::move(sink));
  result->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [zero rank 0] [%^%l%$] %v");
  result->set_level(default_level(0, std::getenv("ZERO_LOG_LEVEL")));
  result->flush_on(spdlog::level::warn);
  return result;
}

}  // namespace

std::shared_ptr<spdlog::logger> logger_ptr() {
  static std::shared_ptr<spdlog::logger> instance = make_logger();
  return instance;
}

spdlog::logger& logger() {
  return *logger_ptr();
}

std::optional<spdlog::level::level_enum> parse_level(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "trace") return spdlog::level::trace;
  if (lower == "debug") return spdlog::level::debug;
  if (lower == "info") return spdlog::level::info;
  if (lower == "warn" || lower == "warning") return spdlog::level::warn;
  if (lower == "error") return spdlog::level::err;
  if (lower == "critical") return spdlog::level::critical;
  if (lower == "off") return spdlog::level::off;
  return std::nullopt;
}

spdlog::level::level_enum default_level(int rank, const char* env_value) {
  if (env_value != nullptr && *env_value != '\0') {
    if (auto level = parse_level(env_value)) return *level;
  }
  return rank == 0 ? spdlog::level::info : spdlog::level::warn;
}

void set_rank(int rank) {
  auto& log = logger();
  log.set_pattern("[%Y-%m-%d %H:%M:%S.%e] [zero rank " + std::to_string(rank) + "] [%^%l%$] %v");
  const char* env = std::getenv("ZERO_LOG_LEVEL");
  log.set_level(default_level(rank, env));
  if (env != nullptr && *env != '\0' && !parse_level(env)) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      log.warn("ZERO_LOG_LEVEL={} is not a level; use trace, debug, info, warn, error or off", env);
    });
  }
}

void set_level(spdlog::level::level_enum level) {
  logger().set_level(level);
}

}  // namespace zero::log
