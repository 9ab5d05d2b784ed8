// Where reduced blocks go (see block_sink.h).
#include "engine/gradients/block_sink.h"

#include <algorithm>
#include <utility>

namespace zero::engine {
namespace {

// Calls visit(source, parameter, offset in the parameter, count) for each piece of `block`'s
// bucket, the source in `data` (this rank's block, first element at the block's start).
template <typename Visit>
void for_each_piece(const EngineContext& ctx, const ReducedBlock& block, const char* data,
                    Visit visit) {
  const std::size_t wsize = dtype_size(ctx.layout.modes.wire);
  const std::size_t block_start = static_cast<std::size_t>(block.rank) * block.bucket.block;
  for (const BucketPiece& piece : block.bucket.pieces) {
    const std::size_t p = ctx.layout.trainable[piece.param];
    const char* src =
        data + (bucket_position(block.bucket, piece, block.rank) - block_start) * wsize;
    visit(src, p, piece.begin, piece.end - piece.begin);
  }
}

// Stage 0 without an owned shard: cast back into the replicated gradients.
class Replicated final : public BlockSink {
 public:
  Replicated(const EngineContext& context, std::vector<void*> full_grads)
      : ctx_(context), grads_(std::move(full_grads)) {}
  void deliver(const ReducedBlock& block, Event& buffer_read, Stream& epilogue) override {
    const StateModes& modes = ctx_.layout.modes;
    for_each_piece(ctx_, block, block.data,
                   [&](const char* src, std::size_t p, std::size_t begin, std::size_t count) {
                     char* dst = static_cast<char*>(grads_[p]) + begin * dtype_size(modes.compute);
                     ctx_.device.cast(src, modes.wire, dst, modes.compute, count, epilogue);
                     if (block.factor != 1.0f) {
                       ctx_.device.scale(dst, modes.compute, count, block.factor, epilogue);
                     }
                   });
    buffer_read.record(epilogue);
  }

 private:
  const EngineContext ctx_;
  std::vector<void*> grads_;  // per parameter
};

// Added into `grad_flat` (the owned shard, accum dtype) by `adder` on `on`, from `data`.
void add_into_shard(const EngineContext& ctx, const GradTarget& target, const ReducedBlock& block,
                    const char* data, std::size_t before_offset, Device& adder, Stream& on) {
  const DType wire = ctx.layout.modes.wire;
  for_each_piece(
      ctx, block, data, [&](const char* src, std::size_t p, std::size_t begin, std::size_t count) {
        const std::size_t flat = ctx.layout.params[p].flat + begin;
        const std::size_t n = flat >= before_offset ? 0 : std::min(count, before_offset - flat);
        if (n == 0) return;
        char* dst = static_cast<char*>(target.grad_flat) + flat * dtype_size(target.accum);
        if (block.onto_zero) {
          adder.accumulate_onto_zero(src, wire, dst, target.accum, n, block.factor, on);
        } else {
          adder.accumulate(src, wire, dst, target.accum, n, block.factor, on);
        }
      });
}

// The owned shard on the device: added there.
class OwnedShard final : public BlockSink {
 public:
  OwnedShard(const EngineContext& context, const GradTarget& target)
      : ctx_(context), target_(target) {}
  void deliver(const ReducedBlock& block, Event& buffer_read, Stream& epilogue) override {
    add_into_shard(ctx_, target_, block, block.data, kNone, ctx_.device, epilogue);
    buffer_read.record(epilogue);
  }

 private:
  const EngineContext ctx_;
  const GradTarget target_;
};

// Optimizer offload: down to pinned staging, added on the host; the swapped part to the
// gradient swap.
class HostShard final : public BlockSink {
 public:
  HostShard(const EngineContext& context, const GradTarget& target, OverlapTimeline* timeline)
      : ctx_(context), target_(target), timeline_(timeline) {}

  void deliver(const ReducedBlock& block, Event& buffer_read, Stream& epilogue) override {
    const std::size_t bytes = block.bucket.block * dtype_size(ctx_.layout.modes.wire);
    if (timeline_ != nullptr)
      timeline_->comm_begin(OverlapTimeline::Kind::copy, epilogue, epilogue);
    ctx_.device.copy_async(target_.staging, block.data, bytes, epilogue);
    if (timeline_ != nullptr) timeline_->comm_end(epilogue);
    buffer_read.record(epilogue);
    add_resident(block, epilogue);
    if (target_.swap != nullptr) add_swapped(block, epilogue);
  }
  void finish() override {
    if (target_.swap != nullptr) target_.swap->finish_adds();
  }

 private:
  // The offsets before the swap's resident end (all of them without a swap), added into the
  // shard in host memory. On a GPU the adder is a CPU device of its own, whose kernels run in a
  // host task in the epilogue's order; on the CPU it is the device itself, whose kernels queue
  // there directly (a host task waiting on the device's own streams could wait on itself).
  void add_resident(const ReducedBlock& block, Stream& epilogue) {
    const std::size_t cut = target_.swap != nullptr ? target_.resident_end : kNone;
    const char* staged = static_cast<const char*>(target_.staging);
    if (target_.adder == &ctx_.device) {
      add_into_shard(ctx_, target_, block, staged, cut, ctx_.device, epilogue);
      return;
    }
    ctx_.device.launch_host_task(epilogue, [this, block, staged, cut, &adder = *target_.adder] {
      add_into_shard(ctx_, target_, block, staged, cut, adder, adder.default_stream());
      adder.default_stream().synchronize();
    });
  }
  // The offsets from the swap's resident end on, into the gradient swap on the host in the
  // epilogue's order; it may wait for reads and writes (on a GPU and on the asynchronous CPU
  // device in a host thread, on the synchronous CPU device in place, as its host tasks run).
  void add_swapped(const ReducedBlock& block, Stream& epilogue) {
    ctx_.device.launch_host_task(epilogue, [this, block] {
      const DType wire = ctx_.layout.modes.wire;
      const std::size_t cut = target_.resident_end;
      const auto* staged = static_cast<const char*>(target_.staging);
      for_each_piece(ctx_, block, staged,
                     [&](const char* src, std::size_t p, std::size_t begin, std::size_t count) {
                       const std::size_t flat = ctx_.layout.params[p].flat + begin;
                       const std::size_t before = flat >= cut ? 0 : std::min(count, cut - flat);
                       if (before < count) {
                         target_.swap->add(flat + before, src + before * dtype_size(wire), wire,
                                           count - before, block.factor);
                       }
                     });
    });
  }

  const EngineContext ctx_;
  const GradTarget target_;
  OverlapTimeline* timeline_;
};

}  // namespace

std::unique_ptr<BlockSink> make_block_sink(const EngineContext& context, const GradTarget& target,
                                           std::vector<void*> full_grads,
                                           OverlapTimeline* timeline) {
  // Offload first: with the gradient swap the shard in memory may be empty (grad_flat null).
  if (target.staging != nullptr) return std::make_unique<HostShard>(context, target, timeline);
  if (target.grad_flat == nullptr) {
    return std::make_unique<Replicated>(context, std::move(full_grads));
  }
  return std::make_unique<OwnedShard>(context, target);
}

}  // namespace zero::engine
