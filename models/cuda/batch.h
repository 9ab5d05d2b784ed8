// A CUDA model's micro-batch on the GPU: the tokens and targets, the positions grouped by token
// for the deterministic embedding backward, and the per-position losses, with the copies that
// bring them there and back. Shared by the CUDA GPT and the CUDA Llama.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "models/cuda/layers.h"
#include "models/cuda/runtime.h"

namespace zero::cuda_layers {

class DeviceBatch {
 public:
  // Room for `positions` (batch * seq) positions, zeroed on `stream`, the one that uses it.
  DeviceBatch(int positions, Stream stream);

  // Queues the copies of tokens and targets (host, `positions` each) and of their token groups
  // on `stream`, through pinned staging so that the host does not wait for the copies (from
  // pageable memory it may); the host arrays may be reused when it returns. Two staging
  // buffers in turn: an upload waits only for the copies of the one two micro-batches before.
  void upload(const std::int32_t* tokens, const std::int32_t* targets, Stream stream);

  const std::int32_t* tokens() const noexcept { return tokens_.as<std::int32_t>(); }
  const std::int32_t* targets() const noexcept { return targets_.as<std::int32_t>(); }
  const std::int32_t* group_positions() const noexcept { return positions_.as<std::int32_t>(); }
  const std::int32_t* group_starts() const noexcept { return starts_.as<std::int32_t>(); }
  const std::int32_t* group_tokens() const noexcept { return groups_.as<std::int32_t>(); }
  int groups() const noexcept { return group_count_; }
  float* losses() const noexcept { return losses_.as<float>(); }

  // Queues the losses' copy into pinned memory behind the forward on `stream`, and notes which
  // positions count (host target >= 0; `counted` of them): the host does not wait.
  void queue_loss(const std::int32_t* targets, int counted, Stream stream);
  // The oldest queued micro-batch's mean loss over its counted positions (0 when none), once
  // its copy has landed: waits for that copy only. Throws std::logic_error when none is queued.
  float take_loss();
  std::size_t queued_losses() const noexcept { return queued_.size(); }

 private:
  // One micro-batch's losses on their way to the host.
  struct QueuedLoss {
    PinnedBuffer losses;
    CudaEvent copied;
    std::vector<std::uint8_t> counts;  // per position: its target is >= 0
    int counted = 0;
  };

  // One upload's host side, in pinned memory: tokens, targets, then the token groups.
  struct Staging {
    PinnedBuffer data;
    CudaEvent copied;
    bool used = false;
  };

  int positions_count_;
  DeviceBuffer tokens_, targets_, positions_, starts_, groups_, losses_;
  int group_count_ = 0;
  Staging staging_[2];
  int next_staging_ = 0;
  std::deque<QueuedLoss> queued_;
  std::vector<QueuedLoss> spare_;  // taken, their pinned memory reused
};

// The float values of `rows` rows of `cols` bf16 on the device, rows `ld` >= cols elements apart
// (the logits on a padded vocabulary), packed: copied on `stream`, which it waits for.
std::vector<float> download_rows(const Bf16* device, std::size_t rows, std::size_t cols,
                                 std::size_t ld, Stream stream);

}  // namespace zero::cuda_layers
