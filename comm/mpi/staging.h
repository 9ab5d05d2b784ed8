// Pinned host blocks for MPI on device buffers: the data goes device -> pinned, through MPI,
// and back. Blocks are reserved once and reused, so steady-state collectives allocate nothing.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

namespace zero {
class Device;
}

namespace zero::comm::mpi {

class StagingPool {
 public:
  explicit StagingPool(Device& device) : device_(device) {}
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  struct Block {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  // A block of at least `bytes` (thread-safe; released blocks may be handed out again).
  Block acquire(std::size_t bytes);
  void release(Block block);

 private:
  Device& device_;
  std::mutex mutex_;
  std::vector<Block> free_;
  std::vector<Block> all_;
};

}  // namespace zero::comm::mpi
