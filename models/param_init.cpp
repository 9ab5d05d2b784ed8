// The reference models' initial values (param_init.h).
#include "models/param_init.h"

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

void ParamInit::initialize(void* user, int param, unsigned long long offset,
                           unsigned long long count, float* out) {
  const ParamInit& init = *static_cast<const ParamInit*>(user);
  const std::size_t at = static_cast<std::size_t>(param);
  const double stddev = init.stddev_[at];
  for (unsigned long long k = 0; k < count; ++k) {
    if (stddev == 0.0) {
      out[k] = init.constant_[at];
      continue;
    }
    // Box-Muller on two hashed uniforms (a pair per element).
    const std::uint64_t base =
        mix(init.seed_ ^ mix(static_cast<std::uint64_t>(param) + 1)) + 2 * (offset + k);
    const double u1 = uniform(base), u2 = uniform(base + 1);
    out[k] = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) *
                                std::cos(6.283185307179586 * u2));
  }
}

}  // namespace zero::models
