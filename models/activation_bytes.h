// What one micro-batch's activations take, as a model allocates them: the bytes held from
// forward to backward, and backward's own buffers. Each family computes it from its sizes
// (gpt::activation_bytes, llama::activation_bytes), so that zero-mem can plan shapes the model
// cannot build here.
#pragma once

#include <cstdint>

namespace zero::models {

struct ActivationBytes {
  std::uint64_t kept = 0;
  std::uint64_t workspace = 0;
  std::uint64_t total() const noexcept { return kept + workspace; }
};

}  // namespace zero::models
