// CPU emulation of CUDA: use_engine_gpu and engine_takes_streams (models/decoder/cuda_ops.h) for
// the CUDA models on a CPU engine, whose bf16 buffers stand for a GPU engine's (the tests adopt
// them as device memory: tests/emu/cuda_side_emulated.cpp). Linked in place of
// models/decoder/engine_gpu.cpp.
#include <stdexcept>
#include <string>

#include "models/decoder/cuda_ops.h"
#include "models/registrar.h"

namespace zero::decoder {

void use_engine_gpu(zero_engine* engine, const char* model) {
  zero_memory_kind kind = ZERO_MEMORY_CUDA;
  int ordinal = -1;
  models::check(zero_data_location(engine, &kind, &ordinal), "zero_data_location");
  if (kind != ZERO_MEMORY_HOST) {
    throw std::runtime_error(std::string(model) +
                             " under the CPU emulation of CUDA needs an engine on the CPU device");
  }
  check_bf16_compute(engine);
  cuda_layers::set_device(0);
}

// The CPU engine takes no stream (its hooks run on the calling thread), and the emulated
// kernels, synchronous, run on the default stream.
bool engine_takes_streams() {
  return false;
}

}  // namespace zero::decoder
