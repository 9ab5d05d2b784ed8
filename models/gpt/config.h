// The reference GPT's sizes: layers, heads, channels, positions and vocabulary, by name or
// custom, and the parameter count they give. Plain data, so that tools (zero-mem) can use the
// shapes without the model or the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "models/activation_bytes.h"

namespace zero::gpt {

struct GptConfig {
  int layers = 4;
  int heads = 4;
  int channels = 128;
  int max_seq = 64;
  int vocab = 256;

  // tiny (for tests and the demo: 4 layers, 4 heads, 128 channels, 64 positions, 256 bytes),
  // gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b. Throws std::invalid_argument for another name.
  static GptConfig by_name(const std::string& name);
  std::int64_t parameters() const;  // with the tied embedding counted once (MLP 4 * channels)
};

// Parameters of a GPT of these sizes whose MLP is `mlp` wide, the tied embedding once.
std::int64_t parameters(const GptConfig& config, std::int64_t mlp);

// The activations of one micro-batch of `batch` sequences of `seq` tokens, as the model keeps
// them, for a GPT of these sizes and an MLP `mlp` wide (4 * channels here), in elements of
// `element_bytes`: what is held from forward to backward (without checkpointing, or with every
// block checkpointed) and backward's own buffers. The model's activation_cost()
// (models/decoder/decoder.h) reports the same kept bytes from its allocations; zero-mem uses
// this for shapes the model cannot build.
using ActivationBytes = models::ActivationBytes;
ActivationBytes activation_bytes(const GptConfig& config, std::int64_t mlp, int batch, int seq,
                                 bool checkpointing, std::size_t element_bytes);

// Forward FLOPs of one micro-batch: matrix products and the attention scores and their use.
double forward_flops(const GptConfig& config, std::int64_t mlp, int batch, int seq);
// One block's share of it (what recomputing a checkpointed block costs).
double block_flops(const GptConfig& config, std::int64_t mlp, int batch, int seq);

}  // namespace zero::gpt
