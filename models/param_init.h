// Initial values of the reference models' parameters, drawn during zero_init: per parameter,
// normal(0, std) from a counter-based hash of (seed, parameter, element), so that an element's
// value does not depend on which rank draws it, how the model is partitioned or how many
// OpenMP threads draw it (large ranges are split over them); or a constant.
#pragma once

#include <cstdint>
#include <vector>

namespace zero::models {

class ParamInit {
 public:
  explicit ParamInit(std::uint64_t seed = 0) : seed_(seed) {}
  // Parameter `id` draws normal(0, stddev), or is `constant` where stddev is 0.
  void set(int id, double stddev, float constant);
  // zero_param_desc's initializer, with `user` this ParamInit.
  static void initialize(void* user, int param, unsigned long long offset, unsigned long long count,
                         float* out);

 private:
  std::uint64_t seed_;
  std::vector<double> stddev_;  // by parameter id
  std::vector<float> constant_;
};

}  // namespace zero::models
