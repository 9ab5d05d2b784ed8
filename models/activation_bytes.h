// What one micro-batch's activations take, as a model allocates them: the bytes held from
// forward to backward, and backward's own buffers. Each family computes it from its sizes
// (gpt::activation_bytes, llama::activation_bytes), so that zero-mem can plan shapes the model
// cannot build here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zero::models {

struct ActivationBytes {
  std::uint64_t kept = 0;
  std::uint64_t workspace = 0;
  std::uint64_t total() const noexcept { return kept + workspace; }
};

// The CPU layers compute in fp32: their activations are 4-byte elements whatever the compute
// dtype, and with a 2-byte compute dtype they widen the open module's parameters and gradients
// into fp32 copies (ComputeCopies), 8 bytes per parameter of the largest module at once.
inline constexpr std::size_t kCpuActivationElement = 4;
inline std::uint64_t cpu_compute_copy_bytes(std::uint64_t largest_module,
                                            std::size_t compute_bytes) {
  return compute_bytes >= 4 ? 0 : 8 * largest_module;
}

}  // namespace zero::models
