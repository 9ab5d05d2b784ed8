// The error model (categories, messages, the internal check) and the logger's rank rules.
#include <catch2/catch.hpp>

#include <set>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/log.h"

namespace zero {

TEST_CASE("make_error formats the message and keeps the category", "[base][error]") {
  const Error error = make_error(ErrorCategory::io, "write of {} bytes to {} failed", 4096, "/x");
  REQUIRE(error.category() == ErrorCategory::io);
  REQUIRE(std::string(error.what()) == "write of 4096 bytes to /x failed");
}

TEST_CASE("every error category has a distinct name", "[base][error]") {
  const ErrorCategory all[] = {
      ErrorCategory::config,        ErrorCategory::usage,   ErrorCategory::comm,
      ErrorCategory::timeout,       ErrorCategory::io,      ErrorCategory::device,
      ErrorCategory::out_of_memory, ErrorCategory::internal};
  std::set<std::string_view> names;
  for (auto category : all) names.insert(category_name(category));
  REQUIRE(names.size() == 8);
  REQUIRE(category_name(ErrorCategory::out_of_memory) == "out of memory");
}

TEST_CASE("ZERO_CHECK throws an internal error naming the condition and the file",
          "[base][error]") {
  try {
    const int ranks = 3;
    ZERO_CHECK(ranks == 4, "expected {} ranks", 4);
    FAIL("ZERO_CHECK did not throw");
  } catch (const Error& error) {
    REQUIRE(error.category() == ErrorCategory::internal);
    REQUIRE_THAT(error.what(), Catch::Contains("ranks == 4") &&
                                   Catch::Contains("test_error_log.cpp") &&
                                   Catch::Contains("expected 4 ranks"));
  }
}

TEST_CASE("log levels: rank 0 at info, other ranks at warn, ZERO_LOG_LEVEL overrides both",
          "[base][log]") {
  REQUIRE(log::default_level(0, nullptr) == spdlog::level::info);
  REQUIRE(log::default_level(3, nullptr) == spdlog::level::warn);
  REQUIRE(log::default_level(3, "") == spdlog::level::warn);
  REQUIRE(log::default_level(3, "debug") == spdlog::level::debug);
  REQUIRE(log::default_level(0, "ERROR") == spdlog::level::err);
  REQUIRE(log::default_level(0, "loud") == spdlog::level::info);  // invalid: ignored
  REQUIRE(log::parse_level("Warning") == spdlog::level::warn);
  REQUIRE_FALSE(log::parse_level("verbose").has_value());
}

TEST_CASE("every log line carries the rank", "[base][log]") {
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  auto& logger = log::logger();
  logger.sinks().push_back(sink);
  log::set_rank(5);
  log::set_level(spdlog::level::info);
  log::info("hello from {}", "a test");
  logger.flush();
  logger.sinks().pop_back();
  log::set_rank(0);
  REQUIRE_THAT(captured.str(),
               Catch::Contains("[zero rank 5]") && Catch::Contains("hello from a test"));
}

TEST_CASE("dtype names parse in our spelling and PyTorch's", "[base][dtype]") {
  REQUIRE(parse_dtype("bf16") == DType::bf16);
  REQUIRE(parse_dtype("torch.bfloat16") == DType::bf16);
  REQUIRE(parse_dtype("float16") == DType::f16);
  REQUIRE(parse_dtype("fp32") == DType::f32);
  REQUIRE_FALSE(parse_dtype("fp8").has_value());
  REQUIRE(dtype_size(DType::bf16) == 2);
  REQUIRE(dtype_size(DType::i64) == 8);
}

}  // namespace zero
