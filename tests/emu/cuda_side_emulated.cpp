// CudaSide under the CPU emulation of CUDA (tests/gpu/cuda_side.h): the engine runs on the CPU
// device in bf16, and its parameter and gradient buffers, host memory, stand for device memory
// while the engine hands them out: a kernel argument, a copy or a cuBLASLt operand in no device
// allocation passes when it lies in a buffer that zero_param_data or zero_grad_buffer gives for
// some parameter at that moment (cuda_runtime.h's emu::accept_host_memory), so a gradient used
// outside its module's backward hooks, or any other host pointer, is refused as on a GPU.
#include <cstring>

#include <cuda_runtime.h>

#include "tests/gpu/cuda_side.h"

namespace zero_test {
namespace {

bool judge(const void* pointer, std::size_t bytes, void* side) {
  return static_cast<const CudaSide*>(side)->engine_buffer(pointer, bytes);
}

}  // namespace

CudaSide::CudaSide() = default;

CudaSide::~CudaSide() {
  if (engine_ != nullptr) emu::accept_host_memory(nullptr, nullptr);
}

void CudaSide::fill(zero_create_options& options) const {
  options.device = ZERO_DEVICE_CPU;  // the CPU device, standing for GPU 0
}

void CudaSide::reach(zero_engine* engine, const std::vector<std::size_t>& numels) {
  engine_ = engine;
  numels_ = numels;
  emu::accept_host_memory(judge, this);
}

std::vector<std::uint16_t> CudaSide::read_bf16(const void* buffer, std::size_t count) const {
  std::vector<std::uint16_t> host(count);
  std::memcpy(host.data(), buffer, count * 2);
  return host;
}

}  // namespace zero_test
