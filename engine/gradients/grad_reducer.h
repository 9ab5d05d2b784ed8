// Gradient reduction in buckets (docs/design.md, "Buckets"). Owns each trainable parameter's
// gradient buffer while it exists and its backward bookkeeping, the bucket buffers, the
// averaging factors and the reductions in flight. The plan (which pieces of which gradients
// share a bucket, in which order) is the Layout's. A bucket is issued once every parameter in
// it has had its last backward use of the micro-step, and only after the buckets before it, so
// every rank issues the same collectives in the same order whatever the timing. A full bucket
// is copied rank-major, reduced (all-reduce at stage 0, reduce-scatter at stages 1-3 unless
// reduce_scatter is off) and its block added into the owned gradient shard (the Target), or at
// stage 0 without one cast back into the replicated gradients.
//
// Owns: gradients (stages 0-1 for the run, from the state arena; stages 2-3 from its own
// gradient arena, from a module's pre_backward to the bucket holding the last piece), bucket
// buffers, in-flight reductions, the epilogue stream. Calls: the device (casts, fills, scales,
// copies, host tasks) and the communicators: the shard group's reduce-scatter and, with hybrid
// sharding, each reduced block's all-reduce over the replicas, on the epilogue stream. With
// ZeRO++ qgZ the reduce-scatter is a quantize (base/block_quant.h) of the bucket's blocks into
// packed chunks behind the bucket buffer, an all-to-all of the chunks over the shard group, and
// on the epilogue stream the received chunks dequantized and summed in fp32 in rank order into
// this rank's block: what follows (replicas, the adds) is unchanged. Streams:
// buckets are filled on the device's default stream, which the engine orders after the caller's
// stream at post_backward (so a bucket reads the gradients the caller wrote) and the caller's
// stream after at pre_backward (so the caller adds into zeroed buffers). What follows a reduction
// runs on the epilogue stream: the reduction is blocked onto it (an event on NCCL, the host on
// MPI), then the reduced block is added into the owned shard there, or copied down to pinned memory
// and added by the CPU (optimizer offload: beside a GPU through a ring of pinned slots, added by
// HostAdds' threads while the next blocks come down; block_sink.h). So the default stream, and
// through it the caller's, never waits for a reduction, only a bucket buffer's refill waits for the
// epilogue that read it (an event per buffer); flush() waits for everything on the host. Internal
// to engine/. Where the reduction is the identity (stage 0 on one rank, memory_plan.h's
// identity_reduction) none runs: the gradients stay where backward wrote them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "base/timer.h"
#include "comm/communicator.h"
#include "comm/work.h"
#include "config/config.h"
#include "device/arena.h"
#include "device/device.h"
#include "engine/collectives/overlap_timeline.h"
#include "engine/collectives/quantization_error.h"
#include "engine/engine_context.h"
#include "engine/gradients/block_sink.h"
#include "engine/gradients/bucket_reduction.h"
#include "engine/gradients/grad_swap.h"
#include "engine/plan/memory_plan.h"
#include "engine/plan/registry.h"

namespace zero::engine {

class GradReducer {
 public:
  // Where reduced blocks go (block_sink.h).
  using Target = GradTarget;

  explicit GradReducer(const EngineContext& context);
  // Waits for reductions still in flight (they use the bucket buffers), unless the
  // communicator is broken.
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // At init, memory taken by the owner of the arenas in the plan's order: stages 0-1 a full
  // gradient per trainable parameter (null for others; zeroed here), the bucket buffers, and at
  // stages 2-3 the gradient arena.
  void attach(std::vector<void*> full_grads, std::vector<void*> bucket_buffers,
              std::unique_ptr<Arena> grad_arena, Target target);

  // The first pre_backward of a micro-step: whether this one reduces (stages 2-3 always,
  // stages 0-1 at the accumulation boundary), every parameter's uses reset.
  void begin_backward(std::int64_t micro_steps);
  // pre_backward of a module using trainable `param`: its gradient buffer, zeroed the first
  // time in a window (stages 0-1) or micro-step (stages 2-3).
  void hand_out(std::size_t param);
  // post_backward of `module` using trainable `param`: one use fewer; at the last, the
  // parameter's buckets may issue.
  void backward_done(std::size_t param, std::string_view module);
  // Issues, in plan order, every bucket whose parameters are all ready.
  void issue_ready();
  // End of a micro-step's backward: parameters not used this time reduced as they are, every
  // bucket issued and finished; a failure of the gradient swap's I/O is thrown here.
  void flush();
  void poll();  // lets reductions in flight progress

  // The gradient a module's backward adds into, while it exists (null otherwise).
  void* grad(std::size_t param) const;
  // Handed out in this window or micro-step.
  bool handed_out(std::size_t param) const;
  // The gradient still holds the zeros it was given: no module using it has had its
  // post_backward since (zero_grad_is_zero in zero.h).
  bool is_zero(std::size_t param) const { return grads_[param].zero; }
  // Stages 0-1: every replicated gradient back to zero (after a step, or a skipped one).
  void zero_full(Stream& stream);
  // Stages 0-1: the replicated gradients as one region of `count` elements (compute dtype), when
  // they lie one after another in the arena with only the alignment's gaps between them (the
  // plan takes them so; the gaps are zeros, attach() writes them, and no block can start in
  // one): a fill, a sum of squares or a check over it is one launch where it was one per
  // parameter. Null data where they do not.
  struct Region {
    void* data = nullptr;
    std::size_t count = 0;
  };
  Region replicated_region() const noexcept { return replicated_; }
  // The owned gradient shard (Target::grad_flat) back to zero without writing it: the next
  // micro-step that reduces writes each reduced block onto zeros (Device::accumulate_onto_zero,
  // the bits of adding into a zeroed shard) rather than adding it, which saves a pass over the
  // shard and the read of the first add.
  void zero_owned() noexcept {
    owned_zero_pending_ = true;
    if (sink_) sink_->owned_zeroed();
  }
  // The reduced gradient's sums, taken on the device as its blocks came down, when every block
  // since zero_owned() did (BlockSink::device_sums); after flush().
  std::optional<DeviceGradSums> device_sums() const {
    return sink_ ? sink_->device_sums() : std::nullopt;
  }
  // Before a micro-step's backward (after begin_backward): its blocks will land on zeros and go
  // down through the device, or end a window summed on the device, so device_sums() will hold
  // after its flush.
  bool sums_on_device_ahead() const noexcept {
    return sink_ && ((owned_zero_pending_ && sink_->direct()) ||
                     (boundary_ && sink_->accumulates_on_device()));
  }
  // Before the owned gradient shard is read: writes its zeros if zero_owned() has not yet been
  // followed by a micro-step's reduction (a no-op after one).
  void settle_owned(std::size_t count, Stream& stream);
  // Seconds blocked on reductions since the last call.
  double take_wait_seconds() { return wait_seconds_.take(); }
  // wall_clock_breakdown: the offload copies are recorded there (null: not).
  void set_timeline(OverlapTimeline* timeline) { timeline_ = timeline; }
  // Optimizer offload: `added(bucket)` runs in a host task in the epilogue's order once the
  // bucket's reduced block is in the owned gradient shard (super_offload's speculation).
  void set_bucket_added(std::function<void(std::size_t)> added) {
    bucket_added_ = std::move(added);
  }

  // qgZ with zero_quantized_error_check: every bucket also reduce-scattered exactly into
  // `exact` (one block of the largest bucket per bucket buffer, wire dtype) and each reduced
  // block measured against it there.
  void set_error(QuantizationError* error, std::vector<void*> exact) {
    reduction_->measure(error, std::move(exact));
  }

  const Arena* grad_arena() const noexcept { return grad_arena_.get(); }
  std::size_t bucket_count() const noexcept { return ctx_.layout.buckets.size(); }

 private:
  struct ParamGrad {
    void* grad = nullptr;
    Block block;                // stages 2-3: the gradient arena's block
    std::size_t uses_left = 0;  // modules using it whose post_backward has not come yet
    bool touched = false;       // handed out (or zeroed) this window or micro-step
    bool zero = true;           // zeroed, and no post_backward of a module using it since
  };
  struct InFlight {
    std::size_t bucket = kNone;
    Reduction reduction;
  };

  void ready(std::size_t param);
  void find_replicated_region();
  void issue(std::size_t bucket);
  void finish(std::size_t slot);
  void release(std::size_t param);
  // A communicator the reductions use has failed: nothing in flight can complete.
  bool broken() const noexcept;

  const EngineContext ctx_;
  const StateModes& modes_;   // the layout's
  int rank_;                  // in the shard group (EngineContext::shards)
  double pre_factor_ = 1.0;   // gradients scaled before the reduction (predivide, prescale)
  double post_factor_ = 1.0;  // and after it: together, the average over ranks
  std::unique_ptr<BucketReduction> reduction_;  // how a bucket is reduced (chosen at creation)
  const bool identity_;              // nothing to reduce: memory_plan.h's identity_reduction
  std::unique_ptr<BlockSink> sink_;  // where its block goes (chosen at attach)

  std::vector<ParamGrad> grads_;       // per parameter
  Region replicated_;                  // stages 0-1, when the gradients are one region
  std::vector<std::size_t> waiting_;   // per bucket: its parameters not yet ready
  std::vector<void*> bucket_buffers_;  // 1, or 2 with overlap_comm (wire dtype)
  std::unique_ptr<Arena> grad_arena_;
  Target target_;
  std::vector<InFlight> in_flight_;                  // one per bucket buffer
  std::unique_ptr<Stream> epilogue_;                 // after the reductions (made by attach)
  std::vector<std::unique_ptr<Event>> buffer_read_;  // per bucket buffer: its epilogue's read
  OverlapTimeline* timeline_ = nullptr;
  std::function<void(std::size_t)> bucket_added_;
  std::size_t next_slot_ = 0;
  std::size_t next_bucket_ = 0;  // the next bucket to issue, in plan order
  bool reducing_ = false;        // this micro-step reduces (stages 2-3, or the boundary)
  bool boundary_ = false;        // this micro-step ends the accumulation window
  // zero_owned() since the last micro-step that reduced: that micro-step's blocks are written
  // onto zeros (cleared when its flush ends).
  bool owned_zero_pending_ = false;
  SecondsSum wait_seconds_;
};

}  // namespace zero::engine
