// The reference models' initial values (param_init.h).
#include "models/param_init.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace zero::models {
namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double uniform(std::uint64_t key) {  // in (0, 1)
  return (static_cast<double>(mix(key) >> 11) + 0.5) / 9007199254740992.0;
}

// Below this many elements a range is drawn on the calling thread (about 26 ns an element).
constexpr std::int64_t kParallelFrom = 1 << 14;

}  // namespace

void ParamInit::set(int id, double stddev, float constant) {
  const std::size_t at = static_cast<std::size_t>(id);
  if (stddev_.size() <= at) {
    stddev_.resize(at + 1, 0.0);
    constant_.resize(at + 1, 0.0f);
  }
  stddev_[at] = stddev;
  constant_[at] = constant;
}

// Every element is a function of (seed, parameter, element) alone, so the loop is split over
// the OpenMP threads and gives the same values at any thread count.
void ParamInit::initialize(void* user, int param, unsigned long long offset,
                           unsigned long long count, float* out) {
  const ParamInit& init = *static_cast<const ParamInit*>(user);
  const std::size_t at = static_cast<std::size_t>(param);
  const double stddev = init.stddev_[at];
  const auto n = static_cast<std::int64_t>(count);
  if (stddev == 0.0) {
    std::fill(out, out + n, init.constant_[at]);
    return;
  }
  const std::uint64_t key = mix(init.seed_ ^ mix(static_cast<std::uint64_t>(param) + 1));
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (std::int64_t k = 0; k < n; ++k) {
    // Box-Muller on two hashed uniforms (a pair per element).
    const std::uint64_t base = key + 2 * (offset + static_cast<std::uint64_t>(k));
    const double u1 = uniform(base), u2 = uniform(base + 1);
    out[k] = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) *
                                std::cos(6.283185307179586 * u2));
  }
}

}  // namespace zero::models
