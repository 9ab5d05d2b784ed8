// The reference models' initial values (models/param_init.h): a function of (seed, parameter,
// element) alone, whatever the thread count and however the range is cut into calls.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <omp.h>

#include "models/param_init.h"

namespace zero::models {
namespace {

std::vector<float> draw(ParamInit& init, int param, unsigned long long offset, std::size_t count,
                        int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  std::vector<float> out(count);
  ParamInit::initialize(&init, param, offset, count, out.data());
  omp_set_num_threads(before);
  return out;
}

}  // namespace

TEST_CASE("param init: the same values at any thread count and in any cut", "[models]") {
  ParamInit init(1234);
  init.set(0, 0.02, 0.0f);
  init.set(1, 0.0, 1.0f);
  // Large enough to be split over the threads, odd so the threads' shares differ.
  const std::size_t n = (1 << 16) + 37;
  const std::vector<float> one = draw(init, 0, 5, n, 1);
  for (int threads : {2, 3, 7}) {
    INFO(threads << " threads");
    const std::vector<float> many = draw(init, 0, 5, n, threads);
    CHECK(std::memcmp(one.data(), many.data(), n * sizeof(float)) == 0);
  }
  // Cut in two calls at an odd place: the elements are keyed by their global offset.
  const std::size_t cut = 20011;
  std::vector<float> head = draw(init, 0, 5, cut, 3);
  const std::vector<float> tail = draw(init, 0, 5 + cut, n - cut, 2);
  head.insert(head.end(), tail.begin(), tail.end());
  CHECK(std::memcmp(one.data(), head.data(), n * sizeof(float)) == 0);
  // Normal(0, 0.02): the draws are not all alike, and their spread is the stddev's.
  double sum = 0, squares = 0;
  for (float v : one) sum += v, squares += static_cast<double>(v) * v;
  const double mean = sum / n, stddev = std::sqrt(squares / n - mean * mean);
  CHECK(std::fabs(mean) < 1e-3);
  CHECK(stddev == Approx(0.02).epsilon(0.02));
  // Another parameter draws other values; a constant one is its constant.
  ParamInit other(1234);
  other.set(0, 0.0, 0.0f);
  other.set(1, 0.02, 0.0f);
  CHECK(draw(other, 1, 5, 64, 2) != std::vector<float>(one.begin(), one.begin() + 64));
  const std::vector<float> constant = draw(init, 1, 0, n, 3);
  CHECK(std::all_of(constant.begin(), constant.end(), [](float v) { return v == 1.0f; }));
}

}  // namespace zero::models
