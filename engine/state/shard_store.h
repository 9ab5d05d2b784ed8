// Where each parameter's stage-3 compute shard lives, as the ParamFetcher sees it: device
// memory, host memory (offload_param cpu), or a region of the parameter swap file
// (offload_param nvme), read through a few pinned read buffers. Implemented by the owner of the
// compute shards. Internal to engine/.
#pragma once

#include <cstddef>

#include "device/device.h"
#include "offload/aio.h"

namespace zero::engine {

class ShardStore {
 public:
  virtual ~ShardStore() = default;

  // The shard in device memory, to all-gather from directly; null when it is elsewhere.
  virtual const void* device_shard(std::size_t param) = 0;
  // Copies the shard into `place` (device memory), waiting for a read from NVMe.
  virtual void copy_shard(std::size_t param, void* place) = 0;
  // A shard in host memory (not swapped): its copy into `place` queued on `stream`, so that a
  // gather issued after it on that stream follows without the host waiting.
  virtual void place_shard(std::size_t param, void* place, Stream& stream) = 0;

  // offload_param nvme: whether the shard is a region of the swap file.
  virtual bool swapped(std::size_t param) const = 0;
  // Read buffers for asynchronous reads (offload_param.buffer_count; 0 without NVMe).
  virtual std::size_t read_buffers() const = 0;
  // Starts reading the swapped shard into read buffer `buffer`.
  virtual offload::Ticket start_read(std::size_t param, std::size_t buffer) = 0;
  // Waits for that read; the shard is then at the returned address (host memory).
  virtual const void* finish_read(offload::Ticket ticket, std::size_t buffer) = 0;
};

}  // namespace zero::engine
