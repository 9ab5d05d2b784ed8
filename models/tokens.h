// The check every reference model makes of a micro-batch before its forward.
#pragma once

#include <cstdint>

namespace zero::models {

// Throws std::invalid_argument naming the first position whose token is outside 0..vocab-1 or
// whose target is vocab or more (a target < 0 marks a position without a loss). Returns how
// many of the n positions have a target.
int count_targets(const std::int32_t* tokens, const std::int32_t* targets, int n, int vocab);

}  // namespace zero::models
