// The CUDA models where this build has no CUDA: asking for one says so.
#include <stdexcept>

#include "models/gpt/cuda_model.h"
#include "models/gpu_info.h"
#include "models/llama/cuda_model.h"

namespace zero {
namespace {

[[noreturn]] void no_cuda() {
  throw std::runtime_error(
      "this build of zero has no CUDA layers (nvcc was not found when it was configured): "
      "rebuild on a machine with the CUDA toolkit, or train on the CPU with --device 1");
}

}  // namespace

std::unique_ptr<models::CausalLm> gpt::make_cuda_gpt(zero_engine*, const GptConfig&, int, int,
                                                     std::uint64_t,
                                                     const models::ActivationOptions&) {
  no_cuda();
}

std::unique_ptr<models::CausalLm> llama::make_cuda_llama(zero_engine*, const LlamaConfig&, int, int,
                                                         std::uint64_t,
                                                         const models::ActivationOptions&) {
  no_cuda();
}

models::GpuInfo models::gpu_info(int) {
  no_cuda();
}

}  // namespace zero
