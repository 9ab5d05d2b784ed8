// The GPU a CUDA model runs on, for MFU: its name and dense bf16 tensor peak (0 when unknown),
// and the FLOPs per trained token by PaLM's accounting (Chowdhery et al. 2022, appendix B).
#pragma once

#include <cstdint>
#include <string>

namespace zero::models {

struct GpuInfo {
  std::string name;
  double bf16_peak_flops = 0;  // H100 SXM 989e12, PCIe 756e12, NVL 835e12, H200 989e12, A100 312e12
};
// Throws std::runtime_error in a build without CUDA, or when CUDA cannot describe the GPU.
GpuInfo gpu_info(int ordinal);

// PaLM's FLOPs per trained token: 6 N + 12 L H T, N the parameters that multiply (the lookup-only
// embeddings left out: GPT-2's position table, an untied token table), L layers, H the attention
// width (heads x head size), T the sequence length (the scores and their weighted sum, not
// halved for the causal mask).
inline double palm_flops_per_token(std::int64_t multiplying_params, int layers, int attention_width,
                                   int seq) {
  return 6.0 * static_cast<double>(multiplying_params) +
         12.0 * layers * static_cast<double>(attention_width) * seq;
}

}  // namespace zero::models
