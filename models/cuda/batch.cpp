// A CUDA model's micro-batch on the GPU (batch.h).
#include "models/cuda/batch.h"

#include <cstring>
#include <stdexcept>
#include <utility>

namespace zero::cuda_layers {

DeviceBatch::DeviceBatch(int positions, Stream stream)
    : positions_count_(positions),
      tokens_(static_cast<std::size_t>(positions) * 4, stream),
      targets_(static_cast<std::size_t>(positions) * 4, stream),
      positions_(static_cast<std::size_t>(positions) * 4, stream),
      starts_((static_cast<std::size_t>(positions) + 1) * 4, stream),
      groups_(static_cast<std::size_t>(positions) * 4, stream),
      losses_(static_cast<std::size_t>(positions) * 4, stream) {
  // tokens, targets, group positions and tokens (positions each), group starts (positions + 1)
  const std::size_t bytes = (5 * static_cast<std::size_t>(positions) + 1) * 4;
  for (Staging& s : staging_) s.data = PinnedBuffer(bytes);
}

void DeviceBatch::upload(const std::int32_t* tokens, const std::int32_t* targets, Stream stream) {
  Staging& staging = staging_[next_staging_];
  next_staging_ = 1 - next_staging_;
  if (staging.used) staging.copied.synchronize();  // two uploads back: long copied
  const TokenGroups groups = cuda_layers::group_positions(tokens, positions_count_);
  group_count_ = static_cast<int>(groups.tokens.size());
  char* at = staging.data.as<char>();
  const auto put = [&](void* device, const void* host, std::size_t bytes) {
    std::memcpy(at, host, bytes);
    copy_to_device(device, at, bytes, stream);
    at += bytes;
  };
  const std::size_t bytes = static_cast<std::size_t>(positions_count_) * 4;
  put(tokens_.as<void>(), tokens, bytes);
  put(targets_.as<void>(), targets, bytes);
  put(positions_.as<void>(), groups.positions.data(), groups.positions.size() * 4);
  put(starts_.as<void>(), groups.starts.data(), groups.starts.size() * 4);
  put(groups_.as<void>(), groups.tokens.data(), groups.tokens.size() * 4);
  staging.copied.record(stream);
  staging.used = true;
}

void DeviceBatch::queue_loss(const std::int32_t* targets, int counted, Stream stream) {
  const auto positions = static_cast<std::size_t>(positions_count_);
  QueuedLoss q;
  if (!spare_.empty()) {
    q = std::move(spare_.back());
    spare_.pop_back();
  } else {
    q.losses = PinnedBuffer(positions * 4);
  }
  copy_to_host(q.losses.as<void>(), losses_.as<void>(), positions * 4, stream);
  q.copied.record(stream);
  q.counts.resize(positions);
  for (std::size_t i = 0; i < positions; ++i) q.counts[i] = targets[i] >= 0 ? 1 : 0;
  q.counted = counted;
  queued_.push_back(std::move(q));
}

float DeviceBatch::take_loss() {
  if (queued_.empty()) {
    throw std::logic_error("take_loss: no micro-batch's loss is queued (queue_loss first)");
  }
  QueuedLoss q = std::move(queued_.front());
  queued_.pop_front();
  q.copied.synchronize();
  const float* losses = q.losses.as<float>();
  double sum = 0;
  for (std::size_t i = 0; i < q.counts.size(); ++i) {
    if (q.counts[i] != 0) sum += losses[i];
  }
  const float mean = q.counted == 0 ? 0.0f : static_cast<float>(sum / q.counted);
  spare_.push_back(std::move(q));
  return mean;
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
