// Collective agreement for the engine's multi-step operations (init, checkpoints, pretrained
// weights): every rank's text gathered on every rank, a step whose failure on any rank fails
// it on all of them (naming each failing rank and what failed there), and the mean of a few
// values. Owns nothing; calls the communicator, through small device scratch (collectives work
// in device memory), and waits for each collective. Internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "device/device.h"

namespace zero::engine {

class Agreement {
 public:
  Agreement() = default;
  Agreement(Communicator& comm, Device& device) : comm_(&comm), device_(&device) {}

  int rank() const { return comm_->rank(); }
  // Collective: every rank's text, on every rank.
  std::vector<std::string> all_gather_text(const std::string& text);
  // Collective: runs `work` on every rank; when it threw on any, every rank throws one Error
  // saying `what` failed, with each failing rank's message (the first one's category).
  void agree(const std::string& what, const std::function<void()>& work);
  // Collective: each value replaced by its mean over the ranks (in fp32).
  void mean(double* values, std::size_t count);
  // Collective: whether every rank passed the same values (as many on every rank).
  bool same_everywhere(std::span<const std::uint64_t> values);
  // Collective: `root`'s values (as many on every rank), on every rank.
  void broadcast(std::span<std::uint64_t> values, int root);
  // Collective: `root`'s `bytes` bytes at `data` (host memory), on every rank.
  void broadcast_bytes(void* data, std::size_t bytes, int root);

 private:
  Communicator* comm_ = nullptr;
  Device* device_ = nullptr;
};

}  // namespace zero::engine
