// What the CPU layer tests of every model family check with: random inputs, central finite
// differences of a double forward against its backward, and a float layer against the double
// one. The loss is sum_j out_j * r_j for a random r, so the backward's dout is r.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <random>
#include <vector>

namespace zero::test {

using Vec = std::vector<double>;

inline Vec random_vec(std::size_t n, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  Vec v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks d(sum out * r)/d(input) from `analytic` against central differences of `forward`
// over every element of `input` (which forward reads by reference).
inline void check_gradient(const char* what, Vec& input, const Vec& analytic, const Vec& r,
                           const std::function<Vec()>& forward, double tolerance = 1e-6) {
  REQUIRE(analytic.size() == input.size());
  const double h = 1e-5;
  double worst = 0;
  for (std::size_t i = 0; i < input.size(); ++i) {
    const double saved = input[i];
    input[i] = saved + h;
    const double up = dot(forward(), r);
    input[i] = saved - h;
    const double down = dot(forward(), r);
    input[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double error = std::fabs(numeric - analytic[i]) / std::max(1.0, std::fabs(numeric));
    worst = std::max(worst, error);
  }
  INFO(what << ": largest error " << worst);
  CHECK(worst < tolerance);
}

inline std::vector<float> to_float(const Vec& v) {
  return {v.begin(), v.end()};
}

// Float results within `tolerance` (relative to max(1, |x|)) of the double ones.
inline void check_close(const char* what, const std::vector<float>& got, const Vec& want,
                        double tolerance = 1e-4) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - want[i]) / std::max(1.0, std::fabs(want[i])));
  }
  INFO(what << ": float against double, largest difference " << worst);
  CHECK(worst < tolerance);
}

}  // namespace zero::test
