// use_engine_gpu and engine_takes_streams (cuda_ops.h) on a real GPU. The CPU emulation of CUDA
// links its own in its place (tests/emu/engine_gpu.cpp), where a CPU engine's buffers stand for a
// GPU's.
#include <stdexcept>
#include <string>

#include "models/decoder/cuda_ops.h"
#include "models/registrar.h"

namespace zero::decoder {

void use_engine_gpu(zero_engine* engine, const char* model) {
  zero_memory_kind kind = ZERO_MEMORY_HOST;
  int ordinal = -1;
  models::check(zero_data_location(engine, &kind, &ordinal), "zero_data_location");
  if (kind != ZERO_MEMORY_CUDA) {
    throw std::runtime_error(std::string(model) + " needs the engine's parameters on a GPU");
  }
  check_bf16_compute(engine);
  cuda_layers::set_device(ordinal);
}

bool engine_takes_streams() {
  return true;
}

}  // namespace zero::decoder
