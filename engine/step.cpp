// The optimizer step at an accumulation boundary: fp16 overflow check agreed across ranks (and
// the skip), the global gradient norm from the owned shards only, clipping and unscaling folded
// into the optimizer's gradient scale, the learning-rate schedule, the optimizer over the owned
// flat buffers, and at stages 1-2 the all-gather of the updated shards.
#include <cmath>

#include "base/error.h"
#include "base/log.h"
#include "engine/engine_impl.h"
#include "optim/schedule.h"

namespace zero::engine {
namespace {

float read_scalar(Device& device, const float* scalar) {
  float value = 0.0f;
  device.default_stream().synchronize();
  device.copy(&value, scalar, sizeof(float));
  return value;
}

}  // namespace

// Calls `visit(data, dtype, count)` for the gradients the optimizer reads on this rank.
template <class Visit>
static void for_each_owned_grad(Engine::Impl& e, Visit visit) {
  if (e.model_state->grad_flat() != nullptr) {
    visit(e.model_state->grad_flat(), e.accum, e.owned.total);
    return;
  }
  for (std::size_t p : e.trainable) visit(e.reducer->grad(p), e.compute, e.registry.param(p).numel);
}

// A scalar the state device wrote at `slot` of its scratch, reduced over the shard group.
// With offload beside a GPU it goes up first: the communicator works in device memory.
float Engine::Impl::reduce_scalar(std::size_t slot, ReduceOp op) {
  float* value = model_state->state_scalars(scalars) + slot;
  model_state->state_device().default_stream().synchronize();
  if (value != scalars + slot) device->copy(scalars + slot, value, sizeof(float));
  Stream& stream = device->default_stream();
  if (shard_ranks > 1) comm->all_reduce(scalars + slot, 1, DType::f32, op, &stream).wait();
  return read_scalar(*device, scalars + slot);
}

bool Engine::Impl::check_overflow() {
  Device& d = model_state->state_device();
  Stream& stream = d.default_stream();
  float* flag = model_state->state_scalars(scalars) + 1;
  d.fill(flag, DType::f32, 1, 0.0f, stream);
  for_each_owned_grad(*this, [&](const void* data, DType dtype, std::size_t count) {
    d.check_finite(data, dtype, count, flag, stream);
  });
  return reduce_scalar(1, ReduceOp::max) != 0.0f;
}

double Engine::Impl::global_grad_norm() {
  Device& d = model_state->state_device();
  Stream& stream = d.default_stream();
  float* sum = model_state->state_scalars(scalars);
  d.fill(sum, DType::f32, 1, 0.0f, stream);
  for_each_owned_grad(*this, [&](const void* data, DType dtype, std::size_t count) {
    d.sum_squares(data, dtype, count, sum, stream);
  });
  return std::sqrt(static_cast<double>(reduce_scalar(0, ReduceOp::sum)));
}

std::vector<optim::Slice> Engine::Impl::slices() {
  std::vector<optim::Slice> out;
  out.reserve(trainable.size());
  const std::size_t csize = dtype_size(compute);
  const std::size_t state_size = dtype_size(config.optimizer_state_dtype);
  for (std::size_t p : trainable) {
    const ParamState& state = params[p];
    const GroupSpec& group = registry.group(registry.param(p).group);
    optim::Slice s;
    // With NVMe a swapped parameter's master and moments are found per step group.
    const bool resident = !nvme || state.flat < resident_end;
    s.master = resident ? model_state->master_of(p) : nullptr;
    s.grad = model_state->grad_flat() != nullptr
                 ? static_cast<const void*>(static_cast<const char*>(model_state->grad_flat()) +
                                            state.flat * dtype_size(accum))
                 : reducer->grad(p);
    for (int k = 0; k < 2; ++k) {
      if (model_state->moment(k) != nullptr && resident) {
        s.state[k] = static_cast<char*>(model_state->moment(k)) + state.flat * state_size;
      }
    }
    // Stage 0 writes the replicated copy, stage 3 the compute shard; stages 1-2 write into
    // the all-gather bucket (set per piece by the caller).
    if (mixed && stage == 0) s.param_out = model_state->full(p);
    if (mixed && stage == 3 && !model_state->swapped_param(p)) {
      s.param_out = static_cast<char*>(model_state->compute_shard()) + state.compute_flat * csize;
    }
    s.count = model_state->owned_valid(p);
    s.weight_decay = group.weight_decay;
    s.lr_scale = group.lr_scale;
    // Stochastic rounding keyed by the element's place in the model, not in this rank's
    // buffer: bf16 optimizer states round the same way at any stage and world size.
    s.first_index = state.global_first + state.shape.begin(stage == 0 ? 0 : rank);
    out.push_back(s);
  }
  return out;
}

void Engine::Impl::zero_owned_grads() {
  Stream& stream = device->default_stream();
  if (model_state->grad_flat() != nullptr) {
    model_state->state_device().fill(model_state->grad_flat(), accum, owned.total, 0.0f, model_state->state_device().default_stream());
  }
  reducer->zero_full(stream);
}

StepStats Engine::Impl::boundary_step() {
  StepStats stats;
  stats.stepped = true;
  const double scale = scaler.scale();
  stats.loss_scale = scale;
  // The learning rate this step uses, or on a skipped step the one the schedule still holds.
  const std::int64_t k = optimizer_steps + 1;
  const optim::ScheduleValue value = optim::schedule_at(
      config.scheduler, optim::schedule_iteration(config.scheduler, k), config.optimizer.lr);
  stats.lr = value.lr;

  // fp16 always, bf16 with check_grad_overflow: a step on non-finite gradients is skipped.
  const bool checked = config.precision == config::Precision::fp16 ||
                       (config.precision == config::Precision::bf16 &&
                        config.bf16_check_grad_overflow);
  if (checked && check_overflow()) {
    if (config.precision == config::Precision::fp16) {
      scaler.update(true);  // throws at the minimum scale, before any counter moves
      global_steps += 1;
      log::info("fp16 gradient overflow: step {} skipped, loss scale {} -> {}", global_steps,
                scale, scaler.scale());
    } else {
      global_steps += 1;
      log::warn("bf16 gradients hold a NaN or an infinity: step {} skipped "
                "(bf16.check_grad_overflow)",
                global_steps);
    }
    stats.skipped = true;
    zero_owned_grads();
    return stats;
  }

  global_steps += 1;
  const double norm_scaled = global_grad_norm();
  const double norm = norm_scaled / scale;
  stats.grad_norm = norm;
  double grad_scale = 1.0 / scale;
  if (config.gradient_clipping > 0.0) {
    // DeepSpeed: clip = (norm + 1e-6) / max_norm; gradients divided by clip when it exceeds 1.
    const double clip = (norm + 1e-6) / config.gradient_clipping;
    if (clip > 1.0) grad_scale /= clip;
  }

  optim::StepHyper hyper;
  hyper.step = k;
  hyper.lr = value.lr;
  hyper.beta1 = value.beta1.value_or(config.optimizer.beta1);
  hyper.beta2 = value.beta2.value_or(config.optimizer.beta2);
  hyper.grad_scale = grad_scale;
  hyper.seed = options.seed;

  Stream& stream = device->default_stream();
  Stream& state_stream = model_state->state_device().default_stream();
  const std::vector<optim::Slice> all = slices();
  const std::size_t csize = dtype_size(compute);
  const std::size_t state_size = dtype_size(config.optimizer_state_dtype);
  const bool all_gather_after = stage == 1 || stage == 2;
  const int r = shard_ranks == 1 ? 0 : rank;
  std::vector<optim::Slice> pieces;
  for (std::size_t gi = 0; gi < step_groups.size(); ++gi) {
    const Bucket& group = step_groups[gi];
    // NVMe: the group's masters and moments come in from the swap for its step.
    const bool swapped = gi >= resident_groups;
    const GroupView view = swapped ? model_state->swap()->acquire(gi - resident_groups) : GroupView{};
    auto master_at = [&](const BucketPiece& piece) -> float* {
      const std::size_t at = params[trainable[piece.param]].flat + piece.begin;
      return swapped ? view.master + (at - group_lo[gi]) : all[piece.param].master + piece.begin;
    };
    auto state_at = [&](const BucketPiece& piece, int m) -> void* {
      const std::size_t at = params[trainable[piece.param]].flat + piece.begin;
      if (swapped) return static_cast<char*>(view.state[m]) + (at - group_lo[gi]) * state_size;
      return static_cast<char*>(all[piece.param].state[m]) + piece.begin * state_size;
    };
    // Where this rank's updated compute values go: its block of the all-gather bucket (stages
    // 1-2) or the compute copy itself (stages 0 and 3); with offload first the pinned staging,
    // copied up after.
    char* block = all_gather_after
                      ? static_cast<char*>(model_state->gather_buffer()) + static_cast<std::size_t>(rank) *
                                                                group.block * csize
                      : nullptr;
    char* out = offload || param_nvme ? static_cast<char*>(model_state->param_staging()) : block;
    const std::size_t block_start = static_cast<std::size_t>(r) * group.block;
    pieces.clear();
    for (const BucketPiece& piece : group.pieces) {
      const optim::Slice& whole = all[piece.param];
      const std::size_t count = piece_valid(piece, whole.count);
      if (count == 0) continue;
      optim::Slice s = whole;
      s.master = master_at(piece);
      s.grad = static_cast<const char*>(whole.grad) +
               piece.begin * dtype_size(model_state->grad_flat() != nullptr ? accum : compute);
      for (int m = 0; m < config.optimizer.state_buffers(); ++m) s.state[m] = state_at(piece, m);
      if (!mixed) {
        s.param_out = nullptr;
      } else if (out != nullptr) {
        s.param_out = out + (bucket_position(group, piece, r) - block_start) * csize;
      } else {
        s.param_out = static_cast<char*>(whole.param_out) + piece.begin * csize;
      }
      s.count = count;
      s.first_index = whole.first_index + piece.begin;
      pieces.push_back(s);
    }
    Timer optimizer_timer;
    optimizer->step(pieces, hyper, offload ? state_stream : stream);
    if (config.wall_clock_breakdown || offload) (offload ? state_stream : stream).synchronize();
    timers.optimizer += optimizer_timer.seconds();

    // The updated values the optimizer did not write in place: fp32 masters, or (offload) the
    // staging, into the all-gather block or the stage-3 compute shards; a shard on NVMe is
    // assembled whole and written at its last piece.
    for (const BucketPiece& piece : group.pieces) {
      const std::size_t p = trainable[piece.param];
      const std::size_t count = piece_valid(piece, all[piece.param].count);
      const bool on_nvme = stage == 3 && model_state->swapped_param(p);
      char* shard = on_nvme ? model_state->param_swap()->assemble(p) : nullptr;
      const void* from = nullptr;
      if (!mixed) {
        from = master_at(piece);
      } else if (offload || param_nvme) {
        from = out + (bucket_position(group, piece, r) - block_start) * csize;
      }
      char* to = nullptr;
      if (all_gather_after) {
        to = block + (bucket_position(group, piece, r) - block_start) * csize;
      } else if (on_nvme) {
        to = shard + piece.begin * csize;
      } else if (stage == 3 && params[p].compute_flat != kNone) {
        to = static_cast<char*>(model_state->compute_shard()) + (params[p].compute_flat + piece.begin) * csize;
      }
      if (count != 0 && from != nullptr && to != nullptr && to != from) {
        device->copy_async(to, from, count * csize, stream);
      }
      if (on_nvme && piece.end == shard_shape(registry.param(p).numel, world).shard) {
        stream.synchronize();
        model_state->param_swap()->write_assembled();
      }
    }
    if (swapped) {
      stream.synchronize();  // the copies above read the buffer the write takes
      model_state->swap()->release(gi - resident_groups);
    }
    if (!all_gather_after) continue;

    Timer allgather_timer;
    comm->all_gather(block, model_state->gather_buffer(), group.block, compute, &stream).wait();
    timers.allgather += allgather_timer.seconds();
    const char* buffer = static_cast<const char*>(model_state->gather_buffer());
    for (const BucketPiece& piece : group.pieces) {
      const std::size_t p = trainable[piece.param];
      const ShardShape& shape = params[p].shape;
      for (int q = 0; q < world; ++q) {
        const std::size_t count = piece_valid(piece, shape.valid(q));
        if (count == 0) continue;
        device->copy_async(static_cast<char*>(model_state->full(p)) +
                               (shape.begin(q) + piece.begin) * csize,
                           buffer + bucket_position(group, piece, q) * csize, count * csize,
                           stream);
      }
    }
  }
  if (model_state->swap()) model_state->swap()->finish();
  if (model_state->param_swap()) model_state->param_swap()->finish_writes();  // the next gathers read these shards
  stream.synchronize();
  optimizer_steps = k;
  scaler.update(false);
  zero_owned_grads();
  fetcher->release_unheld(/*stale=*/true);
  return stats;
}

}  // namespace zero::engine
