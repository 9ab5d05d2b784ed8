#pragma once

// Small statistics the benchmarks share.

#include <algorithm>
#include <cstddef>
#include <vector>

namespace zero::bench {

// The median of `values` (the mean of the two middle values for an even count).
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace zero::bench
