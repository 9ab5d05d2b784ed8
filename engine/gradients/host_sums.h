// The owned gradient's sum of squares on the host over several threads, block by block as
// host::sum_squares cuts it (host::kSquaresBlock elements, each block's sum in double, the
// blocks' sums added in order from 0.0): the same double whatever the thread count, so the
// norm and the clip factor are the single-threaded pass's. The optimizer-offloaded step's norm
// over the shard in host memory. Internal to engine/.
#pragma once

#include <cstddef>

#include "base/dtype.h"

namespace zero::engine {

double parallel_sum_squares(const void* data, DType dtype, std::size_t count, int threads);

}  // namespace zero::engine
