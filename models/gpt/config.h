// The reference GPT's sizes: layers, heads, channels, positions and vocabulary, by name or
// custom, and the parameter count they give. Plain data, so that tools (zero-mem) can use the
// shapes without the model or the engine.
#pragma once

#include <cstdint>
#include <string>

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
  std::int64_t parameters() const;  // with the tied embedding counted once
};

}  // namespace zero::gpt
