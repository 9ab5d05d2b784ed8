// Where reduced blocks go (see block_sink.h).
#include "engine/gradients/block_sink.h"

#include <algorithm>
#include <utility>

#include "engine/gradients/host_adds.h"

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

// `added` in the epilogue's order, once what is queued there before it has run.
void announce(Device& device, Stream& epilogue, std::function<void()> added) {
  if (added) device.launch_host_task(epilogue, std::move(added));
}

// Stage 0 without an owned shard: cast back into the replicated gradients.
class Replicated final : public BlockSink {
 public:
  Replicated(const EngineContext& context, std::vector<void*> full_grads)
      : ctx_(context), grads_(std::move(full_grads)) {}
  void deliver(const ReducedBlock& block, Event& buffer_read, Stream& epilogue,
               std::function<void()> added) override {
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
    announce(ctx_.device, epilogue, std::move(added));
  }

 private:
  const EngineContext ctx_;
  std::vector<void*> grads_;  // per parameter
};

// Added into `grad_flat` (the owned shard, accum dtype) by `adder` on `on`, from `data`: the
// offsets before `before_offset`, and of each piece the `part`-th of `parts` element ranges
// (HostAdds' threads split a block so).
void add_into_shard(const EngineContext& ctx, const GradTarget& target, const ReducedBlock& block,
                    const char* data, std::size_t before_offset, Device& adder, Stream& on,
                    int part = 0, int parts = 1) {
  const DType wire = ctx.layout.modes.wire;
  const std::size_t wsize = dtype_size(wire);
  const std::size_t asize = dtype_size(target.accum);
  const auto k = static_cast<std::size_t>(part);
  const auto of = static_cast<std::size_t>(parts);
  for_each_piece(
      ctx, block, data, [&](const char* src, std::size_t p, std::size_t begin, std::size_t count) {
        const std::size_t flat = ctx.layout.params[p].flat + begin;
        const std::size_t n = flat >= before_offset ? 0 : std::min(count, before_offset - flat);
        const std::size_t lo = n * k / of;
        const std::size_t hi = n * (k + 1) / of;
        if (hi == lo) return;
        const char* from = src + lo * wsize;
        char* to = static_cast<char*>(target.grad_flat) + (flat + lo) * asize;
        if (block.onto_zero) {
          adder.accumulate_onto_zero(from, wire, to, target.accum, hi - lo, block.factor, on);
        } else {
          adder.accumulate(from, wire, to, target.accum, hi - lo, block.factor, on);
        }
      });
}

// The owned shard on the device: added there.
class OwnedShard final : public BlockSink {
 public:
  OwnedShard(const EngineContext& context, const GradTarget& target)
      : ctx_(context), target_(target) {}
  void deliver(const ReducedBlock& block, Event& buffer_read, Stream& epilogue,
               std::function<void()> added) override {
    add_into_shard(ctx_, target_, block, block.data, kNone, ctx_.device, epilogue);
    buffer_read.record(epilogue);
    announce(ctx_.device, epilogue, std::move(added));
  }

 private:
  const EngineContext ctx_;
  const GradTarget target_;
};

// Optimizer offload: down to pinned staging, added on the host; the swapped part to the
// gradient swap. Beside a GPU (the adder a CPU device of its own) through the ring of slots,
// added by HostAdds' threads; on the CPU device (the adder the device itself) through one slot,
// added by its kernels in the epilogue's order (a host task waiting on the device's own
// streams could wait on itself).
class HostShard final : public BlockSink {
 public:
  HostShard(const EngineContext& context, const GradTarget& target, OverlapTimeline* timeline)
      : ctx_(context), target_(target), timeline_(timeline) {
    if (target_.adder != &ctx_.device) {
      adds_ = std::make_unique<HostAdds>(target_.staging_slots, target_.host_threads,
                                         ctx_.device.trace());
    }
  }

  void deliver(const ReducedBlock& block, Event& buffer_read, Stream& epilogue,
               std::function<void()> added) override {
    if (adds_ != nullptr && target_.device_flat != nullptr) {
      deliver_on_device(block, buffer_read, epilogue, std::move(added));
      return;
    }
    if (adds_ != nullptr && block.onto_zero && target_.device_block != nullptr) {
      deliver_direct(block, buffer_read, epilogue, std::move(added));
      return;
    }
    host_blocks_ += 1;
    if (adds_ == nullptr) {
      copy_down(block, static_cast<char*>(target_.staging), buffer_read, epilogue);
      add_on_device(block, epilogue);
      if (target_.swap != nullptr) {
        ctx_.device.launch_host_task(epilogue, [this, block] {
          add_swapped(block, static_cast<const char*>(target_.staging));
        });
      }
      announce(ctx_.device, epilogue, std::move(added));
      return;
    }
    // The slot's earlier use added, the block copied into it, its add queued: all in the
    // epilogue's order, the adds themselves on HostAdds' threads.
    const auto [slot, use] = adds_->next_use();
    char* staged = static_cast<char*>(target_.staging) + slot * target_.slot_bytes;
    ctx_.device.launch_host_task(epilogue, [this, slot, use] { adds_->take(slot, use); });
    copy_down(block, staged, buffer_read, epilogue);
    ctx_.device.launch_host_task(epilogue, [this, block, staged, slot, added] {
      const std::size_t cut = target_.swap != nullptr ? target_.resident_end : kNone;
      adds_->submit(
          slot,
          [this, block, staged, cut](int k, int parts) {
            // The adder is a synchronous CPU device: its kernels run on the calling thread.
            Device& adder = *target_.adder;
            add_into_shard(ctx_, target_, block, staged, cut, adder, adder.default_stream(), k,
                           parts);
          },
          [this, block, staged, added] {
            if (target_.swap != nullptr) add_swapped(block, staged);
            if (added) added();
          });
    });
  }
  void finish() override {
    if (adds_ != nullptr) adds_->drain();
    if (target_.swap != nullptr) target_.swap->finish_adds();
  }
  bool direct() const noexcept override {
    return adds_ != nullptr && target_.device_block != nullptr;
  }
  bool accumulates_on_device() const noexcept override {
    return adds_ != nullptr && target_.device_flat != nullptr;
  }
  void owned_zeroed() noexcept override { direct_blocks_ = host_blocks_ = 0; }
  std::optional<DeviceGradSums> device_sums() const override {
    const std::size_t buckets = ctx_.layout.buckets.size();
    if (host_blocks_ != 0 || direct_blocks_ != buckets) return std::nullopt;
    return DeviceGradSums{target_.block_sums, buckets, target_.block_sums + buckets};
  }

 private:
  // direct_reduce (memory_plan.h): onto zeros, so no host arithmetic is left. The block cast to
  // the accumulation dtype and scaled on the device (the bits the host's add onto zeros gives),
  // its sum of squares and non-finite flag taken there, then copied piece by piece (runs
  // contiguous in both merged) straight into the owned shard in host memory.
  void deliver_direct(const ReducedBlock& block, Event& buffer_read, Stream& epilogue,
                      std::function<void()> added) {
    Device& d = ctx_.device;
    const DType accum = target_.accum;
    const std::size_t asize = dtype_size(accum);
    const std::size_t n = block.bucket.block;
    char* cast = static_cast<char*>(target_.device_block);
    d.accumulate_onto_zero(block.data, ctx_.layout.modes.wire, cast, accum, n, block.factor,
                           epilogue);
    buffer_read.record(epilogue);
    const std::size_t buckets = ctx_.layout.buckets.size();
    float* squares = target_.block_sums + block.index;
    d.fill(squares, DType::f32, 1, 0.0f, epilogue);
    d.sum_squares(cast, accum, n, squares, epilogue);
    if (ctx_.config.checks_grad_overflow()) {  // the flag is read only where the step checks
      float* flag = target_.block_sums + buckets;
      if (direct_blocks_ == 0) d.fill(flag, DType::f32, 1, 0.0f, epilogue);
      d.check_finite(cast, accum, n, flag, epilogue);
    }
    if (timeline_ != nullptr)
      timeline_->comm_begin(OverlapTimeline::Kind::copy, epilogue, epilogue);
    char* shard = static_cast<char*>(target_.grad_flat);
    for_each_run(block, [&](std::size_t src, std::size_t dst, std::size_t count) {
      d.copy_async(shard + dst * asize, cast + src * asize, count * asize, epilogue);
    });
    if (timeline_ != nullptr) timeline_->comm_end(epilogue);
    announce(d, epilogue, std::move(added));
    direct_blocks_ += 1;
  }

  // device_accumulation (memory_plan.h): the block added into the owned shard on the device
  // (onto zeros in a window's first micro-step: accumulate_onto_zero, the bits of the host's
  // add), and in the window's last micro-step the sum copied from there straight into the owned
  // shard in host memory, run by run, its sums of squares and non-finite flag taken on the
  // device first as deliver_direct's are. The earlier micro-steps move nothing down.
  void deliver_on_device(const ReducedBlock& block, Event& buffer_read, Stream& epilogue,
                         std::function<void()> added) {
    Device& d = ctx_.device;
    GradTarget on_device = target_;
    on_device.grad_flat = target_.device_flat;
    add_into_shard(ctx_, on_device, block, block.data, kNone, d, epilogue);
    buffer_read.record(epilogue);
    if (!block.last) {
      announce(d, epilogue, std::move(added));
      return;
    }
    const DType accum = target_.accum;
    const std::size_t asize = dtype_size(accum);
    const char* sum = static_cast<const char*>(target_.device_flat);
    const std::size_t buckets = ctx_.layout.buckets.size();
    float* squares = target_.block_sums + block.index;
    d.fill(squares, DType::f32, 1, 0.0f, epilogue);
    const bool check = ctx_.config.checks_grad_overflow();  // the flag is read only then
    float* flag = target_.block_sums + buckets;
    if (check && direct_blocks_ == 0) d.fill(flag, DType::f32, 1, 0.0f, epilogue);
    for_each_run(block, [&](std::size_t, std::size_t at, std::size_t count) {
      d.sum_squares(sum + at * asize, accum, count, squares, epilogue);
      if (check) d.check_finite(sum + at * asize, accum, count, flag, epilogue);
    });
    if (timeline_ != nullptr)
      timeline_->comm_begin(OverlapTimeline::Kind::copy, epilogue, epilogue);
    char* shard = static_cast<char*>(target_.grad_flat);
    for_each_run(block, [&](std::size_t, std::size_t at, std::size_t count) {
      d.copy_async(shard + at * asize, sum + at * asize, count * asize, epilogue);
    });
    if (timeline_ != nullptr) timeline_->comm_end(epilogue);
    announce(d, epilogue, std::move(added));
    direct_blocks_ += 1;
  }

  // Calls run(offset in the block, offset in the owned shard, count) for the block's pieces,
  // runs contiguous in both merged.
  template <typename Run>
  void for_each_run(const ReducedBlock& block, Run run) const {
    std::size_t run_src = 0, run_dst = 0, run_count = 0;
    for (const BucketPiece& piece : block.bucket.pieces) {
      const std::size_t p = ctx_.layout.trainable[piece.param];
      const std::size_t src = piece.offset;
      const std::size_t dst = ctx_.layout.params[p].flat + piece.begin;
      const std::size_t count = piece.end - piece.begin;
      if (run_count != 0 && src == run_src + run_count && dst == run_dst + run_count) {
        run_count += count;
        continue;
      }
      if (run_count != 0) run(run_src, run_dst, run_count);
      run_src = src;
      run_dst = dst;
      run_count = count;
    }
    if (run_count != 0) run(run_src, run_dst, run_count);
  }

  void copy_down(const ReducedBlock& block, char* staged, Event& buffer_read, Stream& epilogue) {
    const std::size_t bytes = block.bucket.block * dtype_size(ctx_.layout.modes.wire);
    if (timeline_ != nullptr)
      timeline_->comm_begin(OverlapTimeline::Kind::copy, epilogue, epilogue);
    ctx_.device.copy_async(staged, block.data, bytes, epilogue);
    if (timeline_ != nullptr) timeline_->comm_end(epilogue);
    buffer_read.record(epilogue);
  }
  // The CPU device: the offsets before the swap's resident end (all of them without a swap)
  // added by its own kernels, queued on the epilogue.
  void add_on_device(const ReducedBlock& block, Stream& epilogue) {
    const std::size_t cut = target_.swap != nullptr ? target_.resident_end : kNone;
    add_into_shard(ctx_, target_, block, static_cast<const char*>(target_.staging), cut,
                   ctx_.device, epilogue);
  }
  // The offsets from the swap's resident end on, into the gradient swap on the host, in the
  // blocks' order; it may wait for reads and writes.
  void add_swapped(const ReducedBlock& block, const char* staged) {
    const DType wire = ctx_.layout.modes.wire;
    const std::size_t cut = target_.resident_end;
    for_each_piece(ctx_, block, staged,
                   [&](const char* src, std::size_t p, std::size_t begin, std::size_t count) {
                     const std::size_t flat = ctx_.layout.params[p].flat + begin;
                     const std::size_t before = flat >= cut ? 0 : std::min(count, cut - flat);
                     if (before < count) {
                       target_.swap->add(flat + before, src + before * dtype_size(wire), wire,
                                         count - before, block.factor);
                     }
                   });
  }

  const EngineContext ctx_;
  const GradTarget target_;
  OverlapTimeline* timeline_;
  std::unique_ptr<HostAdds> adds_;  // beside a GPU; null on the CPU device
  // Since owned_zeroed(): blocks delivered through the device (direct), and through the host.
  std::size_t direct_blocks_ = 0, host_blocks_ = 0;
};

}  // namespace

std::unique_ptr<BlockSink> make_block_sink(const EngineContext& context, const GradTarget& target,
                                           std::vector<void*> full_grads,
                                           OverlapTimeline* timeline) {
  // Offload first: with the gradient swap the shard in memory may be empty (grad_flat null).
  if (target.staging != nullptr) {
    return std::make_unique<HostShard>(context, target, timeline);
  }
  if (target.grad_flat == nullptr) {
    return std::make_unique<Replicated>(context, std::move(full_grads));
  }
  return std::make_unique<OwnedShard>(context, target);
}

}  // namespace zero::engine
