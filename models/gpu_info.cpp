// The GPU's name and peak (gpu_info.h), from the CUDA layers' runtime.
#include "models/gpu_info.h"

#include "models/cuda/runtime.h"

namespace zero::models {

GpuInfo gpu_info(int ordinal) {
  const cuda_layers::GpuPeak peak = cuda_layers::gpu_peak(ordinal);
  return {peak.name, peak.bf16_flops};
}

}  // namespace zero::models
