// GradReducer: gradients, buckets and their reductions (see grad_reducer.h).
#include "engine/gradients/grad_reducer.h"

#include <algorithm>
#include <exception>

#include "base/block_quant.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"

namespace zero::engine {

GradReducer::GradReducer(const EngineContext& context)
    : ctx_(context),
      modes_(context.layout.modes),
      rank_(context.shards().rank()),
      quantized_(context.layout.modes.quantized_gradients),
      grads_(context.registry.param_count()),
      waiting_(context.layout.buckets.size(), 0) {
  // DeepSpeed's averaging: postscale (the default) divides by gradient_predivide_factor before
  // the sum and multiplies by predivide / N after it; prescale_gradients divides by N before.
  // N is the world: with hybrid sharding the sum runs over the shard group, then the replicas.
  const double n = static_cast<double>(ctx_.comm.size());
  const double predivide = ctx_.config.gradient_predivide_factor;
  if (ctx_.config.prescale_gradients) {
    pre_factor_ = 1.0 / n;
    post_factor_ = 1.0;
  } else {
    pre_factor_ = 1.0 / predivide;
    post_factor_ = predivide / n;
  }
}

GradReducer::~GradReducer() {
  for (auto& slot : in_flight_) {
    if (slot.bucket == kNone || broken()) continue;
    try {
      slot.exact.wait();
      slot.work.wait();
    } catch (const std::exception& error) {
      log::warn("engine: an outstanding gradient reduction failed at shutdown: {}", error.what());
    }
  }
  // Its host tasks read the layout and the staging buffer.
  if (epilogue_ != nullptr && !broken()) {
    try {
      epilogue_->synchronize();
    } catch (const std::exception& error) {
      log::warn("engine: finishing the gradient epilogue failed at shutdown: {}", error.what());
    }
  }
}

bool GradReducer::broken() const noexcept {
  Communicator* replicas = ctx_.replicas();
  return ctx_.comm.poisoned() || ctx_.shards().poisoned() ||
         (replicas != nullptr && replicas->poisoned());
}

void GradReducer::attach(std::vector<void*> full_grads, std::vector<void*> bucket_buffers,
                         std::unique_ptr<Arena> grad_arena, Target target) {
  Stream& stream = ctx_.device.default_stream();
  for (std::size_t p = 0; p < full_grads.size() && p < grads_.size(); ++p) {
    grads_[p].grad = full_grads[p];
    if (full_grads[p] != nullptr) {
      ctx_.device.fill(full_grads[p], modes_.compute, ctx_.registry.param(p).numel, 0.0f, stream);
    }
  }
  bucket_buffers_ = std::move(bucket_buffers);
  in_flight_.assign(bucket_buffers_.size(), {});
  epilogue_ = ctx_.device.create_stream();
  buffer_read_.clear();
  for (std::size_t i = 0; i < bucket_buffers_.size(); ++i) {
    buffer_read_.push_back(ctx_.device.create_event());
  }
  grad_arena_ = std::move(grad_arena);
  target_ = target;
}

void GradReducer::begin_backward(std::int64_t micro_steps) {
  const auto steps = ctx_.config.batch.gradient_accumulation_steps;
  reducing_ = modes_.stage >= 2 || (micro_steps + 1) % steps == 0;
  for (std::size_t p : ctx_.layout.trainable) {
    grads_[p].uses_left = ctx_.registry.param(p).modules.size();
    grads_[p].touched = false;
  }
  for (std::size_t b = 0; b < ctx_.layout.buckets.size(); ++b) {
    std::size_t distinct = 0;
    std::size_t last = kNone;
    for (const BucketPiece& piece : ctx_.layout.buckets[b].pieces) {
      if (piece.param != last) ++distinct;
      last = piece.param;
    }
    waiting_[b] = distinct;
  }
  next_bucket_ = 0;
}

void GradReducer::hand_out(std::size_t param) {
  ParamGrad& g = grads_[param];
  if (g.uses_left == 0) {
    throw make_error(ErrorCategory::usage,
                     "pre_backward: parameter '{}' has had a backward from every module that uses "
                     "it this micro-step already; a module's backward may run once per micro-step",
                     ctx_.registry.param(param).name);
  }
  if (g.touched) return;
  g.touched = true;
  if (modes_.stage >= 2) {
    const std::size_t bytes = ctx_.registry.param(param).numel * dtype_size(modes_.compute);
    g.block = grad_arena_->allocate(MemoryKind::grad, bytes);
    g.grad = g.block.ptr;
    ctx_.device.fill(g.grad, modes_.compute, ctx_.registry.param(param).numel, 0.0f,
                     ctx_.device.default_stream());
  }
}

void GradReducer::backward_done(std::size_t param, std::string_view module) {
  ParamGrad& g = grads_[param];
  if (g.uses_left == 0) {
    throw make_error(ErrorCategory::usage,
                     "post_backward of module '{}': parameter '{}' has had a backward from every "
                     "module that uses it this micro-step already; a module's backward may run "
                     "once per micro-step",
                     module, ctx_.registry.param(param).name);
  }
  if (--g.uses_left == 0) ready(param);
}

void* GradReducer::grad(std::size_t param) const {
  return grads_[param].grad;
}

bool GradReducer::handed_out(std::size_t param) const {
  return grads_[param].touched;
}

void GradReducer::zero_full(Stream& stream) {
  if (modes_.stage > 1) return;
  for (std::size_t p : ctx_.layout.trainable) {
    ctx_.device.fill(grads_[p].grad, modes_.compute, ctx_.registry.param(p).numel, 0.0f, stream);
  }
}

void GradReducer::settle_owned(std::size_t count, Stream& stream) {
  if (!owned_zero_pending_) return;
  owned_zero_pending_ = false;
  if (target_.grad_flat != nullptr && count != 0) {
    Device& owner = target_.adder != nullptr ? *target_.adder : ctx_.device;
    owner.fill(target_.grad_flat, target_.accum, count, 0.0f, stream);
  }
}

void GradReducer::release(std::size_t param) {
  ParamGrad& g = grads_[param];
  if (modes_.stage < 2 || g.grad == nullptr) return;
  grad_arena_->release(g.block);
  g.block = {};
  g.grad = nullptr;
}

void GradReducer::ready(std::size_t param) {
  if (!reducing_) return;
  for (std::size_t b : ctx_.layout.param_buckets[ctx_.layout.trainable_pos[param]])
    waiting_[b] -= 1;
}

void GradReducer::issue_ready() {
  if (!reducing_) return;
  while (next_bucket_ < ctx_.layout.buckets.size() && waiting_[next_bucket_] == 0) {
    issue(next_bucket_++);
  }
}

void GradReducer::poll() {
  for (auto& slot : in_flight_) {
    if (slot.bucket != kNone) slot.work.test();
  }
}

void GradReducer::issue(std::size_t b) {
  const std::size_t slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % in_flight_.size();
  if (in_flight_[slot].bucket != kNone) finish(slot);

  Stream& stream = ctx_.device.default_stream();
  buffer_read_[slot]->block(stream);  // the buffer's last epilogue has read it
  const Bucket& bucket = ctx_.layout.buckets[b];
  const std::size_t wsize = dtype_size(modes_.wire);
  const std::size_t csize = dtype_size(modes_.compute);
  char* buffer = static_cast<char*>(bucket_buffers_[slot]);
  for (const BucketPiece& piece : bucket.pieces) {
    const std::size_t p = ctx_.layout.trainable[piece.param];
    const ShardShape& shape = ctx_.layout.params[p].shape;
    const void* grad = grads_[p].grad;
    const std::size_t length = piece.end - piece.begin;
    for (int q = 0; q < modes_.shard_ranks; ++q) {
      const std::size_t start = shape.begin(q) + piece.begin;
      const std::size_t real = piece_valid(piece, shape.valid(q));
      char* dst = buffer + bucket_position(bucket, piece, q) * wsize;
      if (real != 0) {
        if (grad != nullptr) {
          ctx_.device.cast(static_cast<const char*>(grad) + start * csize, modes_.compute, dst,
                           modes_.wire, real, stream);
        } else {
          ctx_.device.fill(dst, modes_.wire, real, 0.0f,
                           stream);  // no gradient this micro-step: zeros
        }
      }
      if (real < length)
        ctx_.device.fill(dst + real * wsize, modes_.wire, length - real, 0.0f, stream);
    }
  }
  const std::size_t total = bucket.block * static_cast<std::size_t>(modes_.shard_ranks);
  if (pre_factor_ != 1.0) {
    ctx_.device.scale(buffer, modes_.wire, total, static_cast<float>(pre_factor_), stream);
  }
  // Gradients whose last piece is in this bucket are no longer needed (stages 2-3).
  for (const BucketPiece& piece : bucket.pieces) {
    if (ctx_.layout.param_buckets[piece.param].back() == b)
      release(ctx_.layout.trainable[piece.param]);
  }

  Work work, exact;
  bool across = false;
  if (modes_.shard_ranks == 1 || !ctx_.config.zero.reduce_scatter) {
    // Over the world: every rank keeps its own shard's part of the whole sum.
    work = ctx_.comm.all_reduce(buffer, total, modes_.wire, ReduceOp::sum, &stream);
  } else if (quantized_) {
    // qgZ: block r of every rank goes to rank r as packed chunks; finish() sums them here.
    const std::size_t chunk = block_quant_bytes(bucket.block);
    char* send = buffer + quantized_bucket_offset(modes_, bucket.block);
    char* received = send + static_cast<std::size_t>(modes_.shard_ranks) * chunk;
    if (error_ != nullptr) {
      exact = ctx_.shards().reduce_scatter(buffer, exact_[slot], bucket.block, modes_.wire,
                                           ReduceOp::sum, &stream);
    }
    ctx_.device.quantize(buffer, modes_.wire, bucket.block,
                         static_cast<std::size_t>(modes_.shard_ranks), send, stream);
    work = ctx_.shards().all_to_all(send, received, chunk, DType::u8, &stream);
    across = ctx_.replicas() != nullptr;
  } else {
    // In place: this rank's block of the bucket receives its reduced block (the shard group's
    // sum; with hybrid sharding, finish() sums it across the replicas).
    work = ctx_.shards().reduce_scatter(
        buffer, buffer + static_cast<std::size_t>(rank_) * bucket.block * wsize, bucket.block,
        modes_.wire, ReduceOp::sum, &stream);
    across = ctx_.replicas() != nullptr;
  }
  in_flight_[slot] = {b, std::move(work), std::move(exact), across};
  if (!ctx_.config.zero.overlap_comm) finish(slot);
}

void GradReducer::finish(std::size_t slot) {
  InFlight& flight = in_flight_[slot];
  const Bucket& bucket = ctx_.layout.buckets[flight.bucket];
  Stream& stream = *epilogue_;
  // The block is read on the epilogue stream after the reduction: an event on NCCL, the host
  // waiting for it on MPI.
  Timer timer;
  flight.work.block(stream);
  const std::size_t wsize = dtype_size(modes_.wire);
  const int r = modes_.shard_ranks == 1 ? 0 : rank_;
  char* buffer = static_cast<char*>(bucket_buffers_[slot]);
  const float post = static_cast<float>(post_factor_);
  const std::size_t block_start = static_cast<std::size_t>(r) * bucket.block;
  char* block = buffer + block_start * wsize;
  if (quantized_) {
    // qgZ: every rank's chunk of this rank's block, dequantized and summed in rank order.
    const std::size_t ranks = static_cast<std::size_t>(modes_.shard_ranks);
    const char* received = buffer + quantized_bucket_offset(modes_, bucket.block) +
                           ranks * block_quant_bytes(bucket.block);
    ctx_.device.dequantize_sum(received, bucket.block, ranks, block, modes_.wire, stream);
    if (error_ != nullptr) {
      flight.exact.block(stream);
      error_->add(QuantizationError::gradients, exact_[slot], block, modes_.wire, bucket.block,
                  stream);
    }
  }
  if (flight.across) {
    // Hybrid sharding: the group's sum of this rank's block, summed over the ranks that hold
    // the same shard in the other groups, after the reduce-scatter (ordered on the epilogue).
    ctx_.replicas()
        ->all_reduce(block, bucket.block, modes_.wire, ReduceOp::sum, &stream)
        .block(stream);
  }
  wait_seconds_.add(timer.seconds());
  if (target_.staging != nullptr) {
    // Optimizer offload: the owned shard is in host memory. This rank's reduced block comes
    // down to pinned memory, then the CPU adds it in, both in the epilogue's order.
    if (timeline_ != nullptr) timeline_->comm_begin(OverlapTimeline::Kind::copy, stream, stream);
    ctx_.device.copy_async(target_.staging, block, bucket.block * wsize, stream);
    if (timeline_ != nullptr) timeline_->comm_end(stream);
    buffer_read_[slot]->record(stream);
    // On a GPU the adder is a CPU device of its own, whose kernels run in a host task in the
    // epilogue's order; on the CPU it is the device itself, whose kernels queue there directly
    // (a host task waiting on the device's own streams could wait on itself).
    const bool own_device = target_.adder == &ctx_.device;
    const std::size_t wire_size = dtype_size(modes_.wire);
    // Calls visit(source in the staging, owned offset, count) for each piece, cut at
    // `resident_end`: resident (true) are the offsets before it, swapped (false) those after.
    const auto pieces = [this, &bucket, r, block_start, wire_size](bool resident, auto visit) {
      const char* staged = static_cast<const char*>(target_.staging);
      const std::size_t cut = target_.swap != nullptr ? target_.resident_end : kNone;
      for (const BucketPiece& piece : bucket.pieces) {
        const std::size_t p = ctx_.layout.trainable[piece.param];
        const char* src = staged + (bucket_position(bucket, piece, r) - block_start) * wire_size;
        const std::size_t flat = ctx_.layout.params[p].flat + piece.begin;
        const std::size_t count = piece.end - piece.begin;
        const std::size_t before = flat >= cut ? 0 : std::min(count, cut - flat);
        if (resident && before != 0) visit(src, flat, before);
        if (!resident && before < count) {
          visit(src + before * wire_size, flat + before, count - before);
        }
      }
    };
    const auto add = [this, pieces, post, onto_zero = owned_zero_pending_](Device& adder,
                                                                           Stream& on) {
      pieces(true, [&](const char* src, std::size_t flat, std::size_t count) {
        char* dst = static_cast<char*>(target_.grad_flat) + flat * dtype_size(target_.accum);
        if (onto_zero) {
          adder.accumulate_onto_zero(src, modes_.wire, dst, target_.accum, count, post, on);
        } else {
          adder.accumulate(src, modes_.wire, dst, target_.accum, count, post, on);
        }
      });
    };
    if (own_device) {
      add(ctx_.device, stream);
    } else {
      ctx_.device.launch_host_task(stream, [add, &adder = *target_.adder] {
        add(adder, adder.default_stream());
        adder.default_stream().synchronize();
      });
    }
    if (target_.swap != nullptr) {
      // The swapped groups' part, into the gradient swap on the host in the epilogue's order;
      // it may wait for reads and writes (on a GPU and on the asynchronous CPU device in a
      // host thread, on the synchronous CPU device in place, as its host tasks run).
      ctx_.device.launch_host_task(stream, [this, pieces, post] {
        pieces(false, [&](const char* src, std::size_t flat, std::size_t count) {
          target_.swap->add(flat, src, modes_.wire, count, post);
        });
      });
    }
    if (bucket_added_) {
      ctx_.device.launch_host_task(stream, [this, b = flight.bucket] { bucket_added_(b); });
    }
    flight = {};
    return;
  }
  for (const BucketPiece& piece : bucket.pieces) {
    const std::size_t p = ctx_.layout.trainable[piece.param];
    const std::size_t length = piece.end - piece.begin;
    const char* src = block + (bucket_position(bucket, piece, r) - block_start) * wsize;
    if (target_.grad_flat != nullptr) {
      char* dst = static_cast<char*>(target_.grad_flat) +
                  (ctx_.layout.params[p].flat + piece.begin) * dtype_size(target_.accum);
      if (owned_zero_pending_) {
        ctx_.device.accumulate_onto_zero(src, modes_.wire, dst, target_.accum, length, post,
                                         stream);
      } else {
        ctx_.device.accumulate(src, modes_.wire, dst, target_.accum, length, post, stream);
      }
    } else {
      // Stage 0 without a separate accumulation dtype: back into the replicated gradient.
      char* dst = static_cast<char*>(grads_[p].grad) + piece.begin * dtype_size(modes_.compute);
      ctx_.device.cast(src, modes_.wire, dst, modes_.compute, length, stream);
      if (post != 1.0f) ctx_.device.scale(dst, modes_.compute, length, post, stream);
    }
  }
  buffer_read_[slot]->record(stream);
  flight = {};
}

void GradReducer::flush() {
  if (!reducing_) return;
  // Gradients without their last use this micro-step (an unused parameter, a module whose
  // backward did not run) are reduced as they are: zeros where nothing was written.
  for (std::size_t p : ctx_.layout.trainable) {
    if (grads_[p].uses_left != 0) {
      grads_[p].uses_left = 0;
      ready(p);
    }
  }
  issue_ready();
  for (std::size_t i = 0; i < in_flight_.size(); ++i) {
    const std::size_t slot = (next_slot_ + i) % in_flight_.size();
    if (in_flight_[slot].bucket != kNone) finish(slot);
  }
  epilogue_->synchronize();
  ctx_.device.default_stream().synchronize();
  owned_zero_pending_ = false;  // every owned block of this micro-step is written
  if (target_.swap != nullptr) target_.swap->finish_adds();
}

}  // namespace zero::engine
