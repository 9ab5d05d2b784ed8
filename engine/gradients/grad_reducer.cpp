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
      reduction_(make_bucket_reduction(context)),
      identity_(identity_reduction(context.config, context.layout)),
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
      slot.reduction.exact.wait();
      slot.reduction.work.wait();
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
  }
  find_replicated_region();
  if (replicated_.data != nullptr) {
    ctx_.device.fill(replicated_.data, modes_.compute, replicated_.count, 0.0f, stream);
  } else {
    for (std::size_t p = 0; p < full_grads.size() && p < grads_.size(); ++p) {
      if (full_grads[p] != nullptr) {
        ctx_.device.fill(full_grads[p], modes_.compute, ctx_.registry.param(p).numel, 0.0f, stream);
      }
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
  full_grads.resize(grads_.size(), nullptr);
  sink_ = make_block_sink(ctx_, target_, std::move(full_grads), timeline_);
  // The owned shard starts as zeros: the first micro-step writes onto them as after a step
  // (direct blocks, the device's sums), and a step before any reduction fills them.
  zero_owned();
}

void GradReducer::begin_backward(std::int64_t micro_steps) {
  const auto steps = ctx_.config.batch.gradient_accumulation_steps;
  boundary_ = (micro_steps + 1) % steps == 0;
  reducing_ = !identity_ && (modes_.stage >= 2 || boundary_);
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
    g.zero = true;
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
  g.zero = false;
  if (--g.uses_left == 0) ready(param);
}

void* GradReducer::grad(std::size_t param) const {
  return grads_[param].grad;
}

bool GradReducer::handed_out(std::size_t param) const {
  return grads_[param].touched;
}

void GradReducer::find_replicated_region() {
  replicated_ = {};
  if (modes_.stage > 1) return;
  const std::size_t csize = dtype_size(modes_.compute);
  char* first = nullptr;
  char* end = nullptr;  // after the last gradient so far
  std::vector<std::size_t> order(ctx_.layout.trainable.begin(), ctx_.layout.trainable.end());
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return grads_[a].grad < grads_[b].grad; });
  for (std::size_t p : order) {
    const std::size_t bytes = ctx_.registry.param(p).numel * csize;
    if (bytes == 0) continue;
    auto* at = static_cast<char*>(grads_[p].grad);
    if (at == nullptr) return;
    if (first == nullptr) {
      first = at;
    } else {
      // Only the alignment's gap from the last one's end: no block can start inside it.
      const auto gap = static_cast<std::size_t>(at - end);
      if (at < end || gap >= Arena::kDefaultAlignment || gap % csize != 0 ||
          reinterpret_cast<std::uintptr_t>(at) % Arena::kDefaultAlignment != 0) {
        return;
      }
    }
    end = at + bytes;
  }
  if (first != nullptr) replicated_ = {first, static_cast<std::size_t>(end - first) / csize};
}

void GradReducer::zero_full(Stream& stream) {
  if (modes_.stage > 1) return;
  for (std::size_t p : ctx_.layout.trainable) grads_[p].zero = true;
  if (replicated_.data != nullptr) {
    ctx_.device.fill(replicated_.data, modes_.compute, replicated_.count, 0.0f, stream);
    return;
  }
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
    if (slot.bucket != kNone) slot.reduction.work.test();
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

  Reduction reduction = reduction_->issue(bucket, slot, buffer, stream);
  in_flight_[slot] = {b, std::move(reduction)};
  if (!ctx_.config.zero.overlap_comm) finish(slot);
}

void GradReducer::finish(std::size_t slot) {
  InFlight& flight = in_flight_[slot];
  const Bucket& bucket = ctx_.layout.buckets[flight.bucket];
  Stream& stream = *epilogue_;
  // The block is read on the epilogue stream after the reduction: an event on NCCL, the host
  // waiting for it on MPI.
  Timer timer;
  flight.reduction.work.block(stream);
  char* buffer = static_cast<char*>(bucket_buffers_[slot]);
  reduction_->complete(bucket, slot, flight.reduction, buffer, stream);
  wait_seconds_.add(timer.seconds());
  const int r = modes_.shard_ranks == 1 ? 0 : rank_;
  const char* block = buffer + static_cast<std::size_t>(r) * bucket.block * dtype_size(modes_.wire);
  std::function<void()> added;
  if (bucket_added_) added = [this, b = flight.bucket] { bucket_added_(b); };
  sink_->deliver({bucket, flight.bucket, r, block, static_cast<float>(post_factor_),
                  owned_zero_pending_, boundary_},
                 *buffer_read_[slot], stream, std::move(added));
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
  sink_->finish();
}

}  // namespace zero::engine
