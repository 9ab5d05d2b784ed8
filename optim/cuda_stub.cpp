// Stands in for the CUDA optimizer when zero is built without CUDA (ZERO_WITH_CUDA=OFF or no
// nvcc): asking for it is a clear error.
#include "base/error.h"
#include "optim/optimizer.h"

namespace zero::optim {

std::unique_ptr<Optimizer> create_cuda_optimizer(const OptimizerSpec&, const Formats&) {
  throw Error(ErrorCategory::device,
              "the CUDA optimizer is not available: zero was built without CUDA; rebuild with "
              "-DZERO_WITH_CUDA=ON where nvcc is installed, or run the optimizer on the CPU");
}

}  // namespace zero::optim
