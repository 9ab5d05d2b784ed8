// Collective agreement for the engine's multi-step operations (init, checkpoints, pretrained
// weights): every rank's text gathered on every rank, a step whose failure on any rank fails
// it on all of them (naming each failing rank and what failed there), and the mean of a few
// values (a trainer's loss, every step). Calls the communicator through device scratch
// (collectives work in device memory) and waits for each collective. Once given the engine's
// scratch (use_scratch) it copies through that, on a stream of its own: a mean after the step
// waits for the communicator's earlier collectives but not for the step's other work on the
// engine's streams, and allocates nothing (a device allocation's free synchronises the GPU).
// Owns that stream. Internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "device/device.h"
#include "device/device_scratch.h"

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

  // From now on collectives of up to `bytes` bytes go through `scratch` (device memory the
  // agreement may use alone, while the engine lives), with the copies on a stream of its own.
  void use_scratch(void* scratch, std::size_t bytes);

 private:
  // Device memory for `bytes`: the given scratch where it fits, else `own`, allocated.
  char* place(std::size_t bytes, std::unique_ptr<DeviceScratch>& own);
  // Host to device or back: on the agreement's stream once it has one (waiting for that stream
  // only), else Device::copy (which waits for the device's default stream).
  void copy(void* dst, const void* src, std::size_t bytes);
  // The stream a collective is ordered after (null: the device's default stream).
  Stream* stream() const noexcept { return stream_.get(); }

  Communicator* comm_ = nullptr;
  Device* device_ = nullptr;
  char* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  std::unique_ptr<Stream> stream_;
};

}  // namespace zero::engine
