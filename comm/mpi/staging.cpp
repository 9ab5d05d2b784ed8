// Reuse by best fit; new blocks are rounded up to a power of two so a few sizes serve all.
#include "comm/mpi/staging.h"

#include <algorithm>
#include <bit>

#include "device/device.h"

namespace zero::comm::mpi {

StagingPool::~StagingPool() {
  for (const Block& block : all_) device_.unreserve(Tier::pinned, block.data, block.bytes);
}

StagingPool::Block StagingPool::acquire(std::size_t bytes) {
  std::lock_guard guard(mutex_);
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->bytes >= bytes && (best == free_.end() || it->bytes < best->bytes)) best = it;
  }
  if (best != free_.end()) {
    const Block block = *best;
    free_.erase(best);
    return block;
  }
  const std::size_t size = std::bit_ceil(std::max<std::size_t>(bytes, 64 * 1024));
  Block block{device_.reserve(Tier::pinned, size), size};
  all_.push_back(block);
  return block;
}

void StagingPool::release(Block block) {
  if (block.data == nullptr) return;
  std::lock_guard guard(mutex_);
  free_.push_back(block);
}

}  // namespace zero::comm::mpi
