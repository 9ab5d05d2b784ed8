// GradPartials: the owned gradient's sum of squares and non-finite check by blocks, taken as step
// groups become final (see grad_partials.h).
#include "engine/gradients/grad_partials.h"

#include <algorithm>

#include "device/host_kernels.h"

namespace zero::engine {

GradPartials::GradPartials(const std::vector<std::pair<std::size_t, std::size_t>>& group_ranges,
                           std::size_t count, bool nonfinite)
    : count_(count), nonfinite_(nonfinite), blocks_of_(group_ranges.size()) {
  const std::size_t blocks = (count + host::kSquaresBlock - 1) / host::kSquaresBlock;
  groups_over_.assign(blocks, 0);
  for (std::size_t g = 0; g < group_ranges.size(); ++g) {
    const auto [begin, end] = group_ranges[g];
    const std::size_t stop = std::min(end, count);
    if (begin >= stop) continue;
    for (std::size_t b = begin / host::kSquaresBlock; b * host::kSquaresBlock < stop; ++b) {
      blocks_of_[g].push_back(b);
      groups_over_[b] += 1;
    }
  }
  sums_.assign(blocks, 0.0);
  flags_.assign(blocks, 0);
  taken_.assign(blocks, 0);
  waiting_ = groups_over_;
}

void GradPartials::begin() {
  waiting_ = groups_over_;
  std::fill(taken_.begin(), taken_.end(), 0);
  taken_early_ = 0;
}

void GradPartials::take(std::size_t block, const void* grad, DType dtype) {
  const std::size_t at = block * host::kSquaresBlock;
  const std::size_t n = std::min(host::kSquaresBlock, count_ - at);
  const void* data = static_cast<const char*>(grad) + at * dtype_size(dtype);
  sums_[block] = host::sum_squares_block(data, dtype, n);
  flags_[block] = nonfinite_ && host::any_nonfinite(data, dtype, n) ? 1 : 0;
  taken_[block] = 1;
}

void GradPartials::group_final(std::size_t group, const void* grad, DType dtype) {
  for (std::size_t b : blocks_of_[group]) {
    if (waiting_[b] == 0 || --waiting_[b] != 0 || taken_[b] != 0) continue;
    take(b, grad, dtype);
    taken_early_ += 1;
  }
}

void GradPartials::finish(const void* grad, DType dtype) {
  for (std::size_t b = 0; b < taken_.size(); ++b) {
    if (taken_[b] == 0) take(b, grad, dtype);
  }
}

double GradPartials::sum_squares() const {
  double sum = 0.0;
  for (double s : sums_) sum += s;  // in order, from 0.0, as host::sum_squares adds its blocks
  return sum;
}

bool GradPartials::any_nonfinite() const {
  return std::any_of(flags_.begin(), flags_.end(), [](char f) { return f != 0; });
}

}  // namespace zero::engine
