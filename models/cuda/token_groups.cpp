// Host helpers of the CUDA layers (layers.h) that need no GPU: the scratch a parameter-gradient
// reduction takes, and the grouping of positions by token that makes the embedding backward
// deterministic (one block per distinct token, no atomics).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "models/cuda/layers.h"

namespace zero::cuda_layers {
namespace {

// A reduction over N rows splits them into min(ceil(N / kRowsPerBlock), kMaxRowBlocks) blocks of
// consecutive rows, each of which leaves one fp32 partial per channel.
constexpr int kRowsPerBlock = 32;
constexpr int kMaxRowBlocks = 256;

}  // namespace

// Room for the partials of two gradients (LayerNorm's weight and bias) over the row blocks:
// 2 * min(ceil(N / 32), 256) * C floats. The norm kernels (norms.cu) take their row-block count
// back from this size, so the two cannot disagree.
std::size_t reduction_scratch_floats(int N, int C) {
  if (N <= 0 || C <= 0) return 0;
  const int blocks = std::min(N / kRowsPerBlock + (N % kRowsPerBlock != 0 ? 1 : 0), kMaxRowBlocks);
  return 2 * static_cast<std::size_t>(blocks) * static_cast<std::size_t>(C);
}

// The groups come in increasing token order (tokens compared as unsigned 32-bit values), each
// group's positions in increasing order: one sort of (token, position) keys, so the result
// depends on the tokens alone.
TokenGroups group_positions(const std::int32_t* tokens, int N) {
  TokenGroups groups;
  const std::size_t count = N > 0 ? static_cast<std::size_t>(N) : 0;
  std::vector<std::uint64_t> keys(count);
  for (std::size_t i = 0; i < count; ++i) {
    keys[i] = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(tokens[i])) << 32) | i;
  }
  std::sort(keys.begin(), keys.end());
  groups.positions.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    const auto token = static_cast<std::int32_t>(static_cast<std::uint32_t>(keys[i] >> 32));
    groups.positions[i] = static_cast<std::int32_t>(keys[i] & 0xffffffffu);
    if (i == 0 || token != groups.tokens.back()) {
      groups.starts.push_back(static_cast<std::int32_t>(i));
      groups.tokens.push_back(token);
    }
  }
  groups.starts.push_back(static_cast<std::int32_t>(count));  // the end of the last group
  return groups;
}

}  // namespace zero::cuda_layers
