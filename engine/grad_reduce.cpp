// Gradient reduction in buckets. The plan (which pieces of which gradients share a bucket, in
// which order) is fixed at init from the registration; at run time a bucket is issued once
// every parameter in it has had its last backward use of the micro-step, and only after the
// buckets before it, so every rank issues the same collectives in the same order whatever the
// timing. A full bucket is copied rank-major (docs/design.md, "Buckets"), reduced (all-reduce at
// stage 0, reduce-scatter at stages 1-3 unless reduce_scatter is off) and its block added into
// the owned gradient shard, or at stage 0 copied back into the replicated gradients.
#include <algorithm>

#include "base/error.h"
#include "engine/engine_impl.h"

namespace zero::engine {

void Engine::Impl::plan_reduction() {
  bucket_runs.assign(buckets.size(), {});
  // DeepSpeed's averaging: postscale (the default) divides by gradient_predivide_factor before
  // the sum and multiplies by predivide / N after it; prescale_gradients divides by N before.
  const double n = static_cast<double>(world);
  const double predivide = config.gradient_predivide_factor;
  if (config.prescale_gradients) {
    pre_factor = 1.0 / n;
    post_factor = 1.0;
  } else {
    pre_factor = 1.0 / predivide;
    post_factor = predivide / n;
  }
}

void Engine::Impl::begin_backward_window() {
  const auto steps = config.batch.gradient_accumulation_steps;
  reducing = stage >= 2 || (micro_steps + 1) % steps == 0;
  for (std::size_t p : trainable) {
    params[p].uses_left = registry.param(p).modules.size();
    params[p].touched = false;
  }
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    std::size_t distinct = 0;
    std::size_t last = kNone;
    for (const BucketPiece& piece : buckets[b].pieces) {
      if (piece.param != last) ++distinct;
      last = piece.param;
    }
    bucket_runs[b] = {distinct};
  }
  next_bucket = 0;
}

void Engine::Impl::hand_out_grad(std::size_t param) {
  ParamState& state = params[param];
  if (state.uses_left == 0) {
    throw make_error(ErrorCategory::usage,
                     "pre_backward: parameter '{}' has had a backward from every module that uses "
                     "it this micro-step already; a module's backward may run once per micro-step",
                     registry.param(param).name);
  }
  if (state.touched) return;
  state.touched = true;
  if (stage >= 2) {
    const std::size_t bytes = registry.param(param).numel * dtype_size(compute);
    state.grad_block = grad_arena->allocate(MemoryKind::grad, bytes);
    state.grad = state.grad_block.ptr;
    device->fill(state.grad, compute, registry.param(param).numel, 0.0f,
                 device->default_stream());
  }
}

void Engine::Impl::release_grad(std::size_t param) {
  ParamState& state = params[param];
  if (stage < 2 || state.grad == nullptr) return;
  grad_arena->release(state.grad_block);
  state.grad_block = {};
  state.grad = nullptr;
}

void Engine::Impl::param_ready(std::size_t param) {
  if (!reducing) return;
  for (std::size_t b : param_buckets[trainable_pos[param]]) bucket_runs[b].waiting -= 1;
}

void Engine::Impl::issue_ready_buckets() {
  if (!reducing) return;
  while (next_bucket < buckets.size() && bucket_runs[next_bucket].waiting == 0) {
    issue_bucket(next_bucket++);
  }
}

void Engine::Impl::issue_bucket(std::size_t b) {
  const std::size_t slot = next_slot;
  next_slot = (next_slot + 1) % in_flight.size();
  if (in_flight[slot].bucket != kNone) finish_bucket(slot);

  Stream& stream = device->default_stream();
  const Bucket& bucket = buckets[b];
  const std::size_t wsize = dtype_size(wire);
  const std::size_t csize = dtype_size(compute);
  char* buffer = static_cast<char*>(bucket_buffers[slot]);
  for (const BucketPiece& piece : bucket.pieces) {
    const std::size_t p = trainable[piece.param];
    const ParamState& state = params[p];
    const std::size_t length = piece.end - piece.begin;
    for (int q = 0; q < shard_ranks; ++q) {
      const std::size_t start = state.shape.begin(q) + piece.begin;
      const std::size_t real = piece_valid(piece, state.shape.valid(q));
      char* dst = buffer + bucket_position(bucket, piece, q) * wsize;
      if (real != 0) {
        if (state.grad != nullptr) {
          device->cast(static_cast<const char*>(state.grad) + start * csize, compute, dst, wire,
                       real, stream);
        } else {
          device->fill(dst, wire, real, 0.0f, stream);  // no gradient this micro-step: zeros
        }
      }
      if (real < length) device->fill(dst + real * wsize, wire, length - real, 0.0f, stream);
    }
  }
  const std::size_t total = bucket.block * static_cast<std::size_t>(shard_ranks);
  if (pre_factor != 1.0) device->scale(buffer, wire, total, static_cast<float>(pre_factor), stream);
  // Gradients whose last piece is in this bucket are no longer needed (stages 2-3).
  for (const BucketPiece& piece : bucket.pieces) {
    if (param_buckets[piece.param].back() == b) release_grad(trainable[piece.param]);
  }

  Work work;
  if (shard_ranks == 1) {
    work = comm->all_reduce(buffer, total, wire, ReduceOp::sum, &stream);
  } else if (config.zero.reduce_scatter) {
    // In place: this rank's block of the bucket receives its reduced block.
    work = comm->reduce_scatter(buffer, buffer + static_cast<std::size_t>(rank) * bucket.block * wsize,
                                bucket.block, wire, ReduceOp::sum, &stream);
  } else {
    work = comm->all_reduce(buffer, total, wire, ReduceOp::sum, &stream);
  }
  in_flight[slot] = {b, std::move(work)};
  if (!config.zero.overlap_comm) finish_bucket(slot);
}

void Engine::Impl::finish_bucket(std::size_t slot) {
  InFlight& flight = in_flight[slot];
  Timer timer;
  flight.work.wait();
  timers.reduce_wait += timer.seconds();
  const Bucket& bucket = buckets[flight.bucket];
  Stream& stream = device->default_stream();
  flight.work.block(stream);
  const std::size_t wsize = dtype_size(wire);
  const int r = shard_ranks == 1 ? 0 : rank;
  const char* buffer = static_cast<const char*>(bucket_buffers[slot]);
  const float post = static_cast<float>(post_factor);
  // With optimizer offload the owned shard is in pinned memory: this rank's reduced block comes
  // down first and the CPU adds it in.
  const std::size_t block_start = static_cast<std::size_t>(r) * bucket.block;
  const char* block = buffer + block_start * wsize;
  if (offload) {
    device->copy_async(reduce_staging, block, bucket.block * wsize, stream);
    stream.synchronize();
    block = static_cast<const char*>(reduce_staging);
  }
  Device& adder = offload ? state_device() : *device;
  Stream& add_stream = adder.default_stream();
  for (const BucketPiece& piece : bucket.pieces) {
    const std::size_t p = trainable[piece.param];
    const ParamState& state = params[p];
    const std::size_t length = piece.end - piece.begin;
    const char* src = block + (bucket_position(bucket, piece, r) - block_start) * wsize;
    if (grad_flat != nullptr) {
      char* dst = static_cast<char*>(grad_flat) + (state.flat + piece.begin) * dtype_size(accum);
      adder.accumulate(src, wire, dst, accum, length, post, add_stream);
    } else {
      // Stage 0 without a separate accumulation dtype: back into the replicated gradient.
      char* dst = static_cast<char*>(state.grad) + piece.begin * dtype_size(compute);
      device->cast(src, wire, dst, compute, length, stream);
      if (post != 1.0f) device->scale(dst, compute, length, post, stream);
    }
  }
  flight = {};
}

void Engine::Impl::flush_reduction() {
  if (!reducing) return;
  // Gradients without their last use this micro-step (an unused parameter, a module whose
  // backward did not run) are reduced as they are: zeros where nothing was written.
  for (std::size_t p : trainable) {
    if (params[p].uses_left != 0) {
      params[p].uses_left = 0;
      param_ready(p);
    }
  }
  issue_ready_buckets();
  for (std::size_t i = 0; i < in_flight.size(); ++i) {
    const std::size_t slot = (next_slot + i) % in_flight.size();
    if (in_flight[slot].bucket != kNone) finish_bucket(slot);
  }
  device->default_stream().synchronize();
}

}  // namespace zero::engine
