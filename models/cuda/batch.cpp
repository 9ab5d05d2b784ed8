// A CUDA model's micro-batch on the GPU (batch.h).
#include "models/cuda/batch.h"

#include <cstring>

namespace zero::cuda_layers {

DeviceBatch::DeviceBatch(int positions, Stream stream)
    : positions_count_(positions),
      tokens_(static_cast<std::size_t>(positions) * 4, stream),
      targets_(static_cast<std::size_t>(positions) * 4, stream),
      positions_(static_cast<std::size_t>(positions) * 4, stream),
      starts_((static_cast<std::size_t>(positions) + 1) * 4, stream),
      groups_(static_cast<std::size_t>(positions) * 4, stream),
      losses_(static_cast<std::size_t>(positions) * 4, stream),
      host_losses_(static_cast<std::size_t>(positions)) {}

void DeviceBatch::upload(const std::int32_t* tokens, const std::int32_t* targets, Stream stream) {
  // Copies from pageable memory return once the source is staged, so the host arrays and the
  // groups below may go as soon as these calls return.
  const std::size_t bytes = static_cast<std::size_t>(positions_count_) * 4;
  copy_to_device(tokens_.as<void>(), tokens, bytes, stream);
  copy_to_device(targets_.as<void>(), targets, bytes, stream);
  const TokenGroups groups = cuda_layers::group_positions(tokens, positions_count_);
  group_count_ = static_cast<int>(groups.tokens.size());
  copy_to_device(positions_.as<void>(), groups.positions.data(), groups.positions.size() * 4,
                 stream);
  copy_to_device(starts_.as<void>(), groups.starts.data(), groups.starts.size() * 4, stream);
  copy_to_device(groups_.as<void>(), groups.tokens.data(), groups.tokens.size() * 4, stream);
}

float DeviceBatch::mean_loss(const std::int32_t* targets, int counted, Stream stream) {
  copy_to_host(host_losses_.data(), losses_.as<void>(), host_losses_.size() * 4, stream);
  synchronize(stream);
  double sum = 0;
  for (int i = 0; i < positions_count_; ++i) {
    if (targets[i] >= 0) sum += host_losses_[static_cast<std::size_t>(i)];
  }
  return counted == 0 ? 0.0f : static_cast<float>(sum / counted);
}

std::vector<float> download_rows(const Bf16* device, std::size_t rows, std::size_t cols,
                                 std::size_t ld, Stream stream) {
  std::vector<Bf16> bits(rows * ld);
  copy_to_host(bits.data(), device, bits.size() * sizeof(Bf16), stream);
  synchronize(stream);
  std::vector<float> values(rows * cols);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      const std::uint32_t wide = static_cast<std::uint32_t>(bits[r * ld + c]) << 16;
      std::memcpy(&values[r * cols + c], &wide, sizeof(float));
    }
  }
  return values;
}

}  // namespace zero::cuda_layers
