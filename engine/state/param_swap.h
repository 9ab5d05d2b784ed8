// offload_param nvme: the stage-3 compute shards past the layout's compute_resident_end are
// per-parameter regions of params.swap, each its shard rounded up to the direct-I/O alignment
// and checksummed like every swap region.
//
// Owns: the file, the regions (placed by an nvme-tier arena that counts their bytes), three
// pinned bounce buffers ([0] synchronous reads and initial values; [1] and [2] assembly in a
// step, alternating so that one shard's write goes on while the next is assembled) and the read
// buffers of the ParamFetcher's reads ahead (offload_param.buffer_count), all from the host
// arena it is given. Calls: the AsyncIO. Waits for its writes when destroyed. Internal to
// engine/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "device/arena.h"
#include "engine/engine_context.h"
#include "offload/aio.h"
#include "offload/swap.h"

namespace zero::engine {

class ParamSwap {
 public:
  // Creates params.swap in `directory` (preallocated: refused when the disk lacks room), sized
  // and its buffers sized by `plan`, and takes the bounce and read buffers from `host_arena`.
  ParamSwap(const EngineContext& context, const MemoryPlan& plan, offload::AsyncIO& io,
            offload::SwapDirectory& directory, Arena& host_arena);
  ~ParamSwap();
  ParamSwap(const ParamSwap&) = delete;
  ParamSwap& operator=(const ParamSwap&) = delete;

  bool swapped(std::size_t param) const;
  std::size_t region_bytes(std::size_t param) const;

  // The shard, read and waited for, in bounce buffer 0 (host memory).
  const void* read(std::size_t param);
  // Initial values: bounce buffer 0 zeroed for `param`'s region, then written by store().
  char* staging(std::size_t param);
  void store(std::size_t param);

  // A step: the shard assembled whole from its pieces (zeroed when a new parameter starts),
  // then its write started; finish_writes() waits for every write.
  char* assemble(std::size_t param);
  void write_assembled();
  void finish_writes();

  // The ParamFetcher's reads ahead, through the read buffers.
  std::size_t read_buffers() const noexcept { return read_buffers_.size(); }
  offload::Ticket start_read(std::size_t param, std::size_t buffer);
  const void* finish_read(offload::Ticket ticket, std::size_t buffer);

  const Arena& arena() const noexcept { return *arena_; }

 private:
  const EngineContext ctx_;
  offload::AsyncIO& io_;
  std::unique_ptr<Arena> arena_;       // the file's byte ranges, by kind
  std::vector<std::uint64_t> region_;  // per parameter: its offset, or kNone
  std::unique_ptr<offload::SwapFile> file_;
  void* bounce_[3] = {nullptr, nullptr, nullptr};
  int assembly_ = 1;                           // the bounce buffer `assembling_` uses
  std::size_t assembling_ = kNone;             // the parameter being assembled
  std::optional<offload::Ticket> writing_[3];  // a write from that buffer, not yet waited for
  std::vector<void*> read_buffers_;
};

}  // namespace zero::engine
