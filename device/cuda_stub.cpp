// Stands in for the CUDA backend when zero is built without CUDA (ZERO_WITH_CUDA=OFF or no
// nvcc): the probe reports why, and asking for a CUDA device is a clear error.
#include "base/error.h"
#include "device/device.h"

namespace zero {

CudaProbe probe_cuda() noexcept {
  return CudaProbe{0, "zero was built without CUDA (ZERO_WITH_CUDA=OFF or nvcc not found)"};
}

std::unique_ptr<Device> create_cuda_device(int) {
  throw Error(ErrorCategory::device,
              "zero was built without CUDA; rebuild with -DZERO_WITH_CUDA=ON where nvcc is "
              "installed");
}

}  // namespace zero
