// CudaSide on a real GPU (cuda_side.h): GPU 0 through the engine's CUDA device, on an NCCL
// world of one; the engine's buffers are device memory already.
#include <stdexcept>

#include <cuda_runtime.h>

#include "tests/gpu/cuda_side.h"
#include "tests/multirank/model_memory.h"

namespace zero_test {

CudaSide::CudaSide() : nccl_(nccl_world_of_one(0)) {}

CudaSide::~CudaSide() {
  if (nccl_ != nullptr) free_nccl_world_of_one(nccl_);
}

void CudaSide::fill(zero_create_options& options) const {
  options.device = ZERO_DEVICE_CUDA;
  options.nccl_comm = nccl_;
}

void CudaSide::reach(zero_engine*, const std::vector<std::size_t>&) {}

std::vector<std::uint16_t> CudaSide::read_bf16(const void* buffer, std::size_t count) const {
  std::vector<std::uint16_t> host(count);
  if (cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpy(host.data(), buffer, count * 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
    throw std::runtime_error("CudaSide::read_bf16: cudaMemcpy failed");
  }
  return host;
}

}  // namespace zero_test
