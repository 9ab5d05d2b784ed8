// The micro-batch check (tokens.h).
#include "models/tokens.h"

#include <stdexcept>
#include <string>

namespace zero::models {

int count_targets(const std::int32_t* tokens, const std::int32_t* targets, int n, int vocab) {
  int counted = 0;
  for (int i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab || targets[i] >= vocab) {
      throw std::invalid_argument(
          "token " + std::to_string(tokens[i]) + " or target " + std::to_string(targets[i]) +
          " at position " + std::to_string(i) + " is outside the vocabulary of " +
          std::to_string(vocab) +
          ": the data was tokenized for a larger vocabulary; give the model that vocabulary "
          "(--vocab) or tokenize with the model's tokenizer");
    }
    if (targets[i] >= 0) ++counted;
  }
  return counted;
}

}  // namespace zero::models
