// The C shim's error conversion: categories to status codes, the thread's last error, version.
#include <catch2/catch.hpp>

#include <cstring>
#include <new>
#include <thread>

#include "engine/api/c_status.h"
#include "zero/zero.h"

namespace zero {

TEST_CASE("guard turns each error category into its status and records the message",
          "[engine][capi]") {
  const std::pair<ErrorCategory, zero_status> cases[] = {
      {ErrorCategory::config, ZERO_ERROR_CONFIG},
      {ErrorCategory::usage, ZERO_ERROR_USAGE},
      {ErrorCategory::comm, ZERO_ERROR_COMM},
      {ErrorCategory::timeout, ZERO_ERROR_TIMEOUT},
      {ErrorCategory::io, ZERO_ERROR_IO},
      {ErrorCategory::device, ZERO_ERROR_DEVICE},
      {ErrorCategory::out_of_memory, ZERO_ERROR_OUT_OF_MEMORY},
      {ErrorCategory::internal, ZERO_ERROR_INTERNAL}};
  for (const auto& [category, status] : cases) {
    const zero_status got = guard([&] { throw Error(category, "what happened"); });
    REQUIRE(got == status);
    REQUIRE(std::string(zero_last_error()) == "what happened");
    REQUIRE(std::string(zero_status_string(got)) == category_name(category));
  }
}

TEST_CASE("guard maps foreign exceptions and keeps a successful call's status OK",
          "[engine][capi]") {
  REQUIRE(guard([] { throw std::bad_alloc(); }) == ZERO_ERROR_OUT_OF_MEMORY);
  REQUIRE(guard([] { throw std::runtime_error("boom"); }) == ZERO_ERROR_INTERNAL);
  REQUIRE_THAT(zero_last_error(), Catch::Contains("boom"));
  REQUIRE(guard([] { throw 42; }) == ZERO_ERROR_INTERNAL);
  REQUIRE(guard([] {}) == ZERO_OK);
}

TEST_CASE("the last error is per thread", "[engine][capi]") {
  guard([] { throw Error(ErrorCategory::io, "main thread"); });
  std::string seen_by_other;
  std::thread other([&] { seen_by_other = zero_last_error(); });
  other.join();
  REQUIRE(seen_by_other.empty());
  REQUIRE(std::string(zero_last_error()) == "main thread");
}

TEST_CASE("status strings cover every code and unknown values", "[engine][capi]") {
  REQUIRE(std::string(zero_status_string(ZERO_OK)) == "ok");
  REQUIRE(std::string(zero_status_string(static_cast<zero_status>(99))) == "unknown status");
}

TEST_CASE("the library version agrees with the header", "[engine][capi]") {
  char expected[32];
  std::snprintf(expected, sizeof expected, "%d.%d.%d", ZERO_VERSION_MAJOR, ZERO_VERSION_MINOR,
                ZERO_VERSION_PATCH);
  REQUIRE(std::string(zero_version()) == expected);
  REQUIRE(zero_version_code() == ZERO_VERSION_CODE);
}

}  // namespace zero
