// The scalar half conversions against independent oracles: the processor's F16C conversion
// (when present) for fp16, and rounding computed in double for bf16; exhaustively over all
// 65536 half values for the way back.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include <immintrin.h>

#include "base/half.h"

namespace zero {
namespace {

// bf16 by definition: the nearest of the two bf16 neighbours in double, ties to the even one.
std::uint16_t bf16_oracle(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t low = static_cast<std::uint16_t>(bits >> 16);
  const std::uint16_t high = static_cast<std::uint16_t>(low + 1);
  if ((bits & 0xffffu) == 0) return low;
  const double x = std::fabs(static_cast<double>(f));
  const double a = std::fabs(static_cast<double>(bf16_to_float(low)));
  // Past the largest finite bf16, IEEE rounding measures against 2^128 (then gives infinity).
  double b = std::fabs(static_cast<double>(bf16_to_float(high)));
  if (std::isinf(b)) b = std::ldexp(1.0, 128);
  if (x - a < b - x) return low;
  if (b - x < x - a) return high;
  return (low & 1u) ? high : low;
}

__attribute__((target("f16c"))) std::uint16_t fp16_hardware(float f) {
  return static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("f16c"))) float fp16_hardware_to_float(std::uint16_t h) {
  return _cvtsh_ss(h);
}

bool have_f16c() {
  return __builtin_cpu_supports("f16c");
}

std::vector<float> interesting_floats() {
  std::vector<float> values;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 2000000; ++i) values.push_back(std::bit_cast<float>(any(rng)));
  // Every half boundary region: around each fp16 and bf16 value, and exact ties.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f16 = fp16_to_float(static_cast<std::uint16_t>(h));
    const float b16 = bf16_to_float(static_cast<std::uint16_t>(h));
    for (float v : {f16, b16}) {
      if (!std::isfinite(v)) continue;
      const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
      for (std::uint32_t d : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0xfffu, 0x1000u, 0x1001u}) {
        values.push_back(std::bit_cast<float>(bits + d));
        values.push_back(std::bit_cast<float>(bits - d));
      }
    }
  }
  const float specials[] = {0.0f,
                            -0.0f,
                            65504.0f,
                            65519.99f,
                            65520.0f,
                            1e-8f,
                            5.96e-8f,
                            2.98e-8f,
                            2.9802322e-8f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min()};
  values.insert(values.end(), std::begin(specials), std::end(specials));
  return values;
}

}  // namespace

TEST_CASE("fp32 to bf16 rounds to nearest even like the double oracle", "[base][half]") {
  std::size_t mismatches = 0;
  for (float f : interesting_floats()) {
    if (std::isnan(f)) continue;
    mismatches += float_to_bf16(f) != bf16_oracle(f);
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("fp32 to bf16 keeps NaN a quiet NaN with its sign", "[base][half]") {
  for (std::uint32_t bits : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fffffffu, 0xffc12345u}) {
    const std::uint16_t h = float_to_bf16(std::bit_cast<float>(bits));
    CAPTURE(bits, h);
    REQUIRE(std::isnan(bf16_to_float(h)));
    REQUIRE((h & 0x8000u) == ((bits >> 16) & 0x8000u));
    REQUIRE((h & 0x0040u) != 0);
  }
}

TEST_CASE("fp32 to fp16 matches the F16C instruction on every tested value", "[base][half]") {
  if (!have_f16c()) {
    WARN("skipped: this CPU has no F16C to compare with");
    return;
  }
  std::size_t mismatches = 0;
  for (float f : interesting_floats()) {
    const std::uint16_t ours = float_to_fp16(f);
    const std::uint16_t theirs = fp16_hardware(f);
    if (std::isnan(f)) {
      mismatches += (ours & 0x7c00u) != 0x7c00u || (ours & 0x3ffu) == 0;
    } else {
      mismatches += ours != theirs;
    }
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("fp32 to fp16 handles overflow, subnormals and ties explicitly", "[base][half]") {
  REQUIRE(float_to_fp16(65504.0f) == 0x7bffu);
  REQUIRE(float_to_fp16(65519.0f) == 0x7bffu);  // below the midpoint to 65536
  REQUIRE(float_to_fp16(65520.0f) == 0x7c00u);  // the midpoint rounds to even: infinity
  REQUIRE(float_to_fp16(-1e6f) == 0xfc00u);
  REQUIRE(float_to_fp16(0x1p-24f) == 0x0001u);           // smallest subnormal
  REQUIRE(float_to_fp16(0x1p-25f) == 0x0000u);           // tie between 0 and 2^-24: even is 0
  REQUIRE(float_to_fp16(0x1.8p-24f) == 0x0002u);         // tie between 1 and 2 ulp: even is 2
  REQUIRE(float_to_fp16(-0x1p-26f) == 0x8000u);          // rounds to -0
  REQUIRE(float_to_fp16(1.0f + 0x1p-11f) == 0x3c00u);    // tie: stays at 1.0 (even)
  REQUIRE(float_to_fp16(1.0f + 0x1.8p-10f) == 0x3c02u);  // tie: rounds up to even
}

TEST_CASE("every fp16 and bf16 value converts to fp32 and back unchanged", "[base][half]") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float f16 = fp16_to_float(half);
    const float b16 = bf16_to_float(half);
    if (!std::isnan(f16)) REQUIRE(float_to_fp16(f16) == half);
    if (!std::isnan(b16)) REQUIRE(float_to_bf16(b16) == half);
    if (have_f16c()) {
      // _cvtsh_ss is exact: compare bit patterns (NaN payloads included).
      const float hw = fp16_hardware_to_float(half);
      REQUIRE(std::bit_cast<std::uint32_t>(hw) == std::bit_cast<std::uint32_t>(f16));
    }
  }
}

}  // namespace zero
