// Logging for the whole library: one spdlog logger named "zero", writing to stderr, with the
// rank in every line. Rank 0 logs at info and the other ranks at warn, so that N ranks do not
// print N copies of the same line; ZERO_LOG_LEVEL (trace, debug, info, warn, error, off)
// sets the level of every rank. The embedder's own spdlog default logger is left alone.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include <spdlog/spdlog.h>

namespace zero::log {

// The logger; created on first use with rank 0's settings.
spdlog::logger& logger();
std::shared_ptr<spdlog::logger> logger_ptr();

// Puts `rank` into every line and chooses the level for that rank (see the file comment).
// Called once the rank is known; safe to call again.
void set_rank(int rank);

// Sets the level explicitly (overrides both the rank default and ZERO_LOG_LEVEL).
void set_level(spdlog::level::level_enum level);

// "trace", "debug", "info", "warn"/"warning", "error", "critical", "off", any case.
std::optional<spdlog::level::level_enum> parse_level(std::string_view text);

// The level a rank uses when nothing is set explicitly: ZERO_LOG_LEVEL when given and valid,
// else info for rank 0 and warn for the others.
spdlog::level::level_enum default_level(int rank, const char* env_value);

template <typename... Args>
void trace(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger().trace(format, std::forward<Args>(args)...);
}
template <typename... Args>
void debug(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger().debug(format, std::forward<Args>(args)...);
}
template <typename... Args>
void info(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger().info(format, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger().warn(format, std::forward<Args>(args)...);
}
template <typename... Args>
void error(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger().error(format, std::forward<Args>(args)...);
}

}  // namespace zero::log
