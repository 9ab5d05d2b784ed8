// The sum of squares over threads (see host_sums.h).
#include "engine/gradients/host_sums.h"

#include <algorithm>
#include <vector>

#include "device/host_kernels.h"

namespace zero::engine {

double parallel_sum_squares(const void* data, DType dtype, std::size_t count, int threads) {
  const std::size_t blocks = (count + host::kSquaresBlock - 1) / host::kSquaresBlock;
  if (threads <= 1 || blocks <= 1) return host::sum_squares(data, dtype, count);
  std::vector<double> sums(blocks);
  const std::size_t size = dtype_size(dtype);
  const auto n = static_cast<long long>(blocks);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (long long b = 0; b < n; ++b) {
    const std::size_t at = static_cast<std::size_t>(b) * host::kSquaresBlock;
    sums[static_cast<std::size_t>(b)] =
        host::sum_squares_block(static_cast<const char*>(data) + at * size, dtype,
                                std::min(host::kSquaresBlock, count - at));
  }
  double total = 0.0;
  for (double s : sums) total += s;
  return total;
}

}  // namespace zero::engine
