// Byte counts for people and from people (base/bytes.h).
#include <catch2/catch.hpp>

#include "base/bytes.h"
#include "base/error.h"

TEST_CASE("bytes: counts for people use binary units with two decimals", "[base]") {
  CHECK(zero::format_bytes(512) == "512 B");
  CHECK(zero::format_bytes(1536) == "1.50 KiB");
  CHECK(zero::format_bytes(80ull << 30) == "80.00 GiB");
}

TEST_CASE("bytes: sizes from people read in powers of 1000 and of 1024, and say what is wrong",
          "[base]") {
  CHECK(zero::parse_bytes("4096", "--size") == 4096);
  CHECK(zero::parse_bytes("80GiB", "--size") == 80ull << 30);
  CHECK(zero::parse_bytes("1.5TB", "--size") == 1'500'000'000'000ull);
  CHECK(zero::parse_bytes("512MiB", "--size") == 512ull << 20);
  CHECK(zero::parse_bytes("2K", "--size") == 2000);
  try {
    zero::parse_bytes("3XB", "--gpu-mem");
    FAIL("an unknown unit was accepted");
  } catch (const zero::Error& error) {
    CHECK(error.category() == zero::ErrorCategory::usage);
    CHECK_THAT(error.what(), Catch::Contains("--gpu-mem '3XB'") && Catch::Contains("GiB"));
  }
  CHECK_THROWS_WITH(zero::parse_bytes("GiB", "--nvme"), Catch::Contains("is not a size"));
  CHECK_THROWS_WITH(zero::parse_bytes("-1GB", "--nvme"), Catch::Contains("is not a size"));
}
