// The host reductions against a plain reference on random data with odd sizes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "base/half.h"
#include "comm/reduce_kernels.h"

namespace zero::comm {
namespace {

template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void check_half(DType dtype, std::size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-100.0f, 100.0f);
  std::vector<std::uint16_t> a(count), b(count);
  for (auto& x : a) x = FromFloat(value(rng));
  for (auto& x : b) x = FromFloat(value(rng));
  auto sum = b, max = b, avg = b;
  reduce_into(dtype, ReduceOp::sum, a.data(), sum.data(), count);
  reduce_into(dtype, ReduceOp::max, a.data(), max.data(), count);
  divide_by(dtype, avg.data(), count, 3);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const float x = ToFloat(a[i]), y = ToFloat(b[i]);
    wrong += sum[i] != FromFloat(x + y);
    wrong += max[i] != (x > y ? a[i] : b[i]);
    wrong += avg[i] != FromFloat(y / 3.0f);
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("fp16 and bf16 sum, max and divide round each element like the reference") {
  std::mt19937 rng(7);
  for (std::size_t count :
       {std::size_t{1}, std::size_t{15}, std::size_t{1023}, std::size_t{4097}}) {
    INFO("count " << count);
    check_half<fp16_to_float, float_to_fp16>(DType::f16, count, rng);
    check_half<bf16_to_float, float_to_bf16>(DType::bf16, count, rng);
  }
}

TEST_CASE("fp32 and int64 reductions, with int64 wrap-free sums beyond 2^53") {
  std::vector<float> a = {1.5f, -2.0f, 3.0f}, b = {0.25f, -4.0f, 5.0f};
  reduce_into(DType::f32, ReduceOp::sum, a.data(), b.data(), 3);
  CHECK(b == std::vector<float>{1.75f, -6.0f, 8.0f});
  reduce_into(DType::f32, ReduceOp::max, a.data(), b.data(), 3);
  CHECK(b == std::vector<float>{1.75f, -2.0f, 8.0f});

  const std::int64_t big = (std::int64_t{1} << 53) + 1;
  std::vector<std::int64_t> x = {big, -7, 9}, y = {big, 3, -10};
  reduce_into(DType::i64, ReduceOp::sum, x.data(), y.data(), 3);
  CHECK(y == std::vector<std::int64_t>{2 * big, -4, -1});
  divide_by(DType::i64, y.data(), 3, 2);
  CHECK(y == std::vector<std::int64_t>{big, -2, 0});  // truncated toward zero
}

TEST_CASE("max propagates NaN from either side") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a = {nan, 1.0f}, b = {2.0f, nan};
  reduce_into(DType::f32, ReduceOp::max, a.data(), b.data(), 2);
  CHECK(std::isnan(b[0]));
  CHECK(std::isnan(b[1]));
  std::vector<std::uint16_t> h = {float_to_bf16(nan)}, k = {float_to_bf16(1.0f)};
  reduce_into(DType::bf16, ReduceOp::max, h.data(), k.data(), 1);
  CHECK(std::isnan(bf16_to_float(k[0])));
}

}  // namespace zero::comm
