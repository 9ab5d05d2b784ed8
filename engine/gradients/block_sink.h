// Where a bucket's reduced block goes, chosen once at attach from where the gradients are kept
// (the GradReducer calls it on the epilogue stream; docs/design.md, "Buckets"):
//   replicated   stage 0 without an owned shard: cast back (and scaled) into the replicated
//                gradients, in the compute dtype;
//   owned shard  added (accumulation dtype) into the owned gradient shard by the device;
//   host shard   optimizer offload: the block copied down to pinned staging, then added into the
//                owned shard in host memory by the host: beside a GPU through a ring of
//                staging slots, added by a pool of threads (HostAdds) while the next blocks
//                come down; on the CPU device by its own kernels in the epilogue's order; with
//                the gradient NVMe swap, the owned offsets from its resident end go to the
//                GradSwap instead. Beside a GPU a block landing on zeros goes down directly,
//                cast on the device (direct_reduce), and with accumulate_on_device a window's
//                blocks are summed in an owned shard on the device and go down directly at
//                its last micro-step (device_accumulation).
// Each piece of the bucket lands at its parameter's place, scaled by the averaging factor; the
// first reduction after GradReducer::zero_owned writes onto zeros rather than adding.
//
// Owns: nothing but the choice and where it writes. Calls: the device (casts, scales, adds,
// copies, host tasks), the adder, the gradient swap. Streams: the epilogue stream; records
// `buffer_read` there once the bucket buffer is no longer read. Internal to engine/.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "device/device.h"
#include "engine/collectives/overlap_timeline.h"
#include "engine/engine_context.h"
#include "engine/gradients/grad_swap.h"
#include "engine/plan/partition.h"

namespace zero::engine {

// The owned gradient shard (accum dtype), added into by `adder`'s kernels (the CPU with
// optimizer offload, which gets the block through `staging` first). With no shard (stage 0,
// gradients in the compute dtype) reduced blocks go back into the replicated gradients. With
// the gradient NVMe swap, owned offsets from `resident_end` on go to `swap` (in a host task after
// the adds into grad_flat, which holds only the part before).
struct GradTarget {
  void* grad_flat = nullptr;
  DType accum = DType::f32;
  Device* adder = nullptr;
  void* staging = nullptr;
  std::size_t staging_slots = 1;  // beside a GPU, a ring of slots (HostAdds)
  std::size_t slot_bytes = 0;     // each slot's
  int host_threads = 1;           // HostAdds' threads (the CPU optimizer's)
  GradSwap* swap = nullptr;
  std::size_t resident_end = 0;
  // memory_plan.h's direct_reduce, on the device: a block of the largest bucket's (accum
  // dtype), and a float per bucket for its sum of squares then one for the non-finite flag.
  void* device_block = nullptr;
  float* block_sums = nullptr;
  // memory_plan.h's device_accumulation: the owned shard on the device (accum dtype, laid out
  // as grad_flat), where a window's blocks are summed; null where they are added on the host.
  void* device_flat = nullptr;
};

// The reduced gradient's sums of squares taken on the device as its blocks came down (a float
// per bucket, in the buckets' order) and its non-finite flag (1.0f when any value was NaN or
// infinite; taken only where the config checks for overflow, Config::checks_grad_overflow), in
// device memory.
struct DeviceGradSums {
  const float* squares = nullptr;
  std::size_t count = 0;
  const float* nonfinite = nullptr;
};

// One reduced block to deliver: `bucket`'s block of this rank (its first element at
// `block_start` of the bucket), in the wire dtype.
struct ReducedBlock {
  const Bucket& bucket;
  std::size_t index;  // the bucket's, in the layout
  int rank;           // whose block (0 with one block per bucket)
  const char* data;
  float factor;    // the averaging after the sum
  bool onto_zero;  // the owned shard's zeros are pending
  bool last;       // the accumulation window's last micro-step (its boundary)
};

class BlockSink {
 public:
  virtual ~BlockSink() = default;
  // `added` (may be empty) runs on the host once the block is in the owned shard, in the
  // blocks' order.
  virtual void deliver(const ReducedBlock& block, Event& buffer_read, Stream& epilogue,
                       std::function<void()> added) = 0;
  // The micro-step's reductions are all delivered and the epilogue synchronized: returns once
  // every block is in the shard (rethrows a host add's failure).
  virtual void finish() {}
  // Blocks that land on zeros go down through the device (direct_reduce), their sums taken
  // there.
  virtual bool direct() const noexcept { return false; }
  // A window's blocks are summed on the device and go down at its last micro-step, their sums
  // taken there (device_accumulation).
  virtual bool accumulates_on_device() const noexcept { return false; }
  // The owned shard was set back to zero (GradReducer::zero_owned).
  virtual void owned_zeroed() noexcept {}
  // Every block since owned_zeroed() went down through the device (direct_reduce), each
  // bucket's once: its sums, taken there; otherwise (host adds since, or none) nothing.
  virtual std::optional<DeviceGradSums> device_sums() const { return std::nullopt; }
};

// The one `target` calls for: the host shard with a staging buffer (whatever part of the shard
// is in memory), else replicated when it has no owned shard (`full_grads`, per parameter, are
// then where blocks go), else the owned shard. `timeline` (may be null)
// records the host shard's copies.
std::unique_ptr<BlockSink> make_block_sink(const EngineContext& context, const GradTarget& target,
                                           std::vector<void*> full_grads,
                                           OverlapTimeline* timeline);

}  // namespace zero::engine
