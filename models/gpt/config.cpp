// The reference GPT's sizes (config.h).
#include "models/gpt/config.h"

#include <stdexcept>

namespace zero::gpt {

GptConfig GptConfig::by_name(const std::string& name) {
  if (name == "tiny") return {4, 4, 128, 64, 256};
  if (name == "gpt2-124m") return {12, 12, 768, 1024, 50257};
  if (name == "gpt2-350m") return {24, 16, 1024, 1024, 50257};
  if (name == "gpt2-774m") return {36, 20, 1280, 1024, 50257};
  if (name == "gpt2-1.5b") return {48, 25, 1600, 1024, 50257};
  throw std::invalid_argument("unknown model '" + name +
                              "': use tiny, gpt2-124m, gpt2-350m, gpt2-774m or gpt2-1.5b");
}

std::int64_t GptConfig::parameters() const {
  const std::int64_t C = channels;
  const std::int64_t block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C +
                             4 * C * C + C;
  return static_cast<std::int64_t>(vocab) * C + static_cast<std::int64_t>(max_seq) * C +
         layers * block + 2 * C;
}

}  // namespace zero::gpt
