// The CPU layers' fp32 view of bf16 and fp16 compute copies (models/layers/compute_copies.h): its
// conversions give base/half.h's reference bits on random and edge values, a parameter reads
// back widened, gradients added in a module's backward reach the engine's half buffer once,
// rounded once, when flushed, and the copies are freed when their module ends.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "base/half.h"
#include "models/layers/compute_copies.h"

namespace zero::layers {

TEST_CASE("compute copies convert as the reference scalar conversions, bit for bit",
          "[models][gpt]") {
  std::mt19937 rng(5);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -65504.0f,
                               65520.0f,
                               1e-8f,
                               5.96e-8f,
                               std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               3.4e38f};
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 20011; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    values.push_back(f);
    values.push_back(std::ldexp(static_cast<float>(i % 1000) / 999.0f - 0.5f, i % 40 - 30));
  }
  std::uint16_t half = 0;
  for (const float f : values) {
    ComputeCopies::store(&half, ZERO_BF16, 0, f);
    REQUIRE(half == float_to_bf16(f));
    REQUIRE(std::bit_cast<std::uint32_t>(ComputeCopies::load(&half, ZERO_BF16, 0)) ==
            std::bit_cast<std::uint32_t>(bf16_to_float(half)));
    ComputeCopies::store(&half, ZERO_FP16, 0, f);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(fp16_to_float(half)));  // NaN stays NaN (payloads may differ)
    } else {
      REQUIRE(half == float_to_fp16(f));
    }
    const float back = ComputeCopies::load(&half, ZERO_FP16, 0);
    REQUIRE((std::isnan(back) ? std::isnan(fp16_to_float(half))
                              : std::bit_cast<std::uint32_t>(back) ==
                                    std::bit_cast<std::uint32_t>(fp16_to_float(half))));
  }
}

TEST_CASE("compute copies widen parameters and add gradients into the half buffer once",
          "[models][gpt]") {
  ComputeCopies copies;
  copies.set_dtype(ZERO_BF16);
  copies.add_param(5);
  std::vector<std::uint16_t> value(5), grad(5);
  for (std::size_t i = 0; i < 5; ++i) {
    value[i] = float_to_bf16(0.25f * static_cast<float>(i) + 1.0f);
    grad[i] = float_to_bf16(1.0f);  // what earlier modules added
  }
  const float* p = copies.param(0, value.data());
  for (std::size_t i = 0; i < 5; ++i) CHECK(p[i] == bf16_to_float(value[i]));

  // Two layers of one module add into the same gradient: one fp32 sum, rounded once (1.006
  // rounds to bf16's 1.0078; each 0.003 alone would round away to 1.0).
  float* g = copies.grad(0, grad.data());
  for (std::size_t i = 0; i < 5; ++i) g[i] += 0.003f;
  g = copies.grad(0, grad.data());
  for (std::size_t i = 0; i < 5; ++i) g[i] += 0.003f;
  CHECK(grad[0] == float_to_bf16(1.0f));  // nothing reaches the engine before the flush
  copies.flush();
  for (std::size_t i = 0; i < 5; ++i) CHECK(grad[i] == float_to_bf16(1.0f + 0.006f));
  CHECK(grad[0] != float_to_bf16(1.0f));
  // The next module's backward starts from zero again.
  g = copies.grad(0, grad.data());
  CHECK(g[0] == 0.0f);
  copies.flush();
  CHECK(grad[0] == float_to_bf16(1.0f + 0.006f));

  // fp32: the engine's buffers themselves.
  ComputeCopies plain;
  plain.add_param(2);
  float buffer[2] = {1, 2};
  CHECK(plain.param(0, buffer) == buffer);
  CHECK(plain.grad(0, buffer) == buffer);
}

TEST_CASE("compute copies live only while their module runs", "[models][gpt]") {
  ComputeCopies copies;
  copies.set_dtype(ZERO_FP16);
  copies.add_param(1001);
  copies.add_param(3);
  std::vector<std::uint16_t> value(1001), grad(3, float_to_fp16(2.0f));
  for (std::size_t i = 0; i < value.size(); ++i) {
    value[i] = float_to_fp16(static_cast<float>(i % 97) * 0.125f);
  }
  CHECK(copies.held_bytes() == 0);
  const float* p = copies.param(0, value.data());
  CHECK(p[1000] == fp16_to_float(value[1000]));
  float* g = copies.grad(1, grad.data());
  g[2] = 0.5f;
  CHECK(copies.held_bytes() == (1001 + 3) * sizeof(float));
  // A forward's end: no gradient waits, the copy goes.
  copies.end_module();
  CHECK(copies.held_bytes() == 0);
  CHECK(grad[2] == float_to_fp16(2.5f));  // the gradient reached the engine's buffer first
  CHECK(grad[0] == float_to_fp16(2.0f));
  // The next module widens it again, from the engine's values as they are then.
  value[1000] = float_to_fp16(-3.0f);
  CHECK(copies.param(0, value.data())[1000] == -3.0f);
  CHECK(copies.held_bytes() == 1001 * sizeof(float));
  // A flush alone frees the gradient buffers and keeps the parameters' copies.
  copies.grad(1, grad.data())[0] = 1.0f;
  copies.flush();
  CHECK(grad[0] == float_to_fp16(3.0f));
  CHECK(copies.held_bytes() == 1001 * sizeof(float));
  copies.end_module();
  CHECK(copies.held_bytes() == 0);
}

}  // namespace zero::layers
