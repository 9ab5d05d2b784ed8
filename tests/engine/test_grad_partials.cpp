// GradPartials (engine/gradients/grad_partials.h): the owned gradient's sum of squares and
// non-finite flag taken block by block as step groups become final, in any order, must be the bits
// of one host::sum_squares over the whole shard; a block is taken early only once every group over
// it is final, and the blocks of no group are left to finish().
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "base/half.h"
#include "device/host_kernels.h"
#include "engine/gradients/grad_partials.h"

namespace zero::engine {
namespace {

constexpr std::size_t kBlock = host::kSquaresBlock;

// Values over many binades, so that the order of the additions shows in the double's last bits.
std::vector<float> partials_grads(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> g(n);
  for (float& x : g) x = std::ldexp(mantissa(rng), exponent(rng));
  return g;
}

bool same_double(double a, double b) {
  return std::memcmp(&a, &b, sizeof(double)) == 0;
}

}  // namespace

TEST_CASE("grad partials: groups final in any order give the bits of one pass over the shard",
          "[engine]") {
  // 3 blocks and a bit; group boundaries inside blocks; elements 7..11 and the tail past the
  // last group belong to no group (padding).
  const std::size_t n = 3 * kBlock + 4097;
  const std::vector<std::pair<std::size_t, std::size_t>> ranges = {
      {0, 7}, {11, kBlock + 5}, {kBlock + 5, 2 * kBlock - 3}, {2 * kBlock - 3, 3 * kBlock + 100}};
  // Random values; and one large value in block 0 with a 1 in each other block, where only the
  // blocks' order gives 2^54 (each 1 rounds away) rather than 2^54 + 4 (the 1s summed first).
  std::vector<float> ordered(n, 0.0f);
  ordered[0] = 0x1p27f;
  for (std::size_t b = 1; b <= 3; ++b) ordered[b * kBlock + 1] = 1.0f;
  for (const auto& [dtype, values] : {std::pair{DType::f32, partials_grads(n, 3)},
                                      {DType::bf16, partials_grads(n, 4)},
                                      {DType::f32, ordered}}) {
    CAPTURE(dtype_name(dtype), values[0]);
    std::vector<std::uint16_t> halves(n);
    for (std::size_t i = 0; i < n; ++i) halves[i] = float_to_bf16(values[i]);
    const void* grad =
        dtype == DType::f32 ? static_cast<const void*>(values.data()) : halves.data();
    const double whole = host::sum_squares(grad, dtype, n);

    // Blocks 0..3 have groups {0, 1}, {1, 2, 3}, {3}, {3}. Per round: the order the groups
    // become final in, and the blocks taken early after each.
    const std::vector<std::pair<std::vector<std::size_t>, std::vector<std::size_t>>> rounds = {
        {{2, 0, 3, 1}, {0, 0, 2, 4}}, {{1, 3, 0, 2}, {0, 2, 3, 4}}};
    GradPartials partials(ranges, n, /*nonfinite=*/true);
    for (const auto& [order, taken] : rounds) {  // begin() makes the second start afresh
      partials.begin();
      for (std::size_t k = 0; k < order.size(); ++k) {
        partials.group_final(order[k], grad, dtype);
        CHECK(partials.taken_early() == taken[k]);
      }
      partials.finish(grad, dtype);
      CHECK(same_double(partials.sum_squares(), whole));
      CHECK_FALSE(partials.any_nonfinite());
    }
  }
}

TEST_CASE("grad partials: a non-finite value in a group's block or in padding is found",
          "[engine]") {
  const std::size_t n = 2 * kBlock + 3;
  std::vector<float> g = partials_grads(n, 5);
  const std::vector<std::pair<std::size_t, std::size_t>> ranges = {{0, kBlock},
                                                                   {kBlock, 2 * kBlock}};
  for (std::size_t at : {std::size_t{17}, kBlock + 1, 2 * kBlock + 2}) {  // the last in no group
    CAPTURE(at);
    std::vector<float> bad = g;
    bad[at] = std::numeric_limits<float>::infinity();
    GradPartials partials(ranges, n, /*nonfinite=*/true);
    partials.begin();
    partials.group_final(1, bad.data(), DType::f32);
    partials.group_final(0, bad.data(), DType::f32);
    CHECK(partials.taken_early() == 2);
    partials.finish(bad.data(), DType::f32);
    CHECK(partials.any_nonfinite());
  }
  // Without the check (the config does not ask for it), no flag is taken.
  std::vector<float> bad = g;
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  GradPartials unchecked(ranges, n, /*nonfinite=*/false);
  unchecked.begin();
  unchecked.finish(bad.data(), DType::f32);
  CHECK_FALSE(unchecked.any_nonfinite());
}

}  // namespace zero::engine
