// Stepper: the optimizer step at an accumulation boundary (see stepper.h).
#include "engine/stepping/stepper.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
#include "device/host_kernels.h"
#include "device/trace.h"
#include "engine/gradients/host_sums.h"
#include "optim/schedule.h"

namespace zero::engine {

optim::ScheduleValue scheduled(const config::Config& config, std::int64_t k) {
  return optim::schedule_at(config.scheduler, optim::schedule_iteration(config.scheduler, k),
                            config.optimizer.lr);
}
namespace {

float read_scalar(Device& device, const float* scalar) {
  float value = 0.0f;
  device.default_stream().synchronize();
  device.copy(&value, scalar, sizeof(float));
  return value;
}

}  // namespace

Stepper::Stepper(const EngineContext& context, ModelState& state, GradReducer& reducer,
                 ParamFetcher& fetcher, float* scalars, std::uint64_t seed)
    : ctx_(context),
      state_(state),
      reducer_(reducer),
      fetcher_(fetcher),
      scalars_(scalars),
      modes_(context.layout.modes),
      rank_(context.shards().rank()),
      staging_read_(context.device.create_event()),
      seed_(seed) {
  // Beside a GPU the updated values go up through the plan's staging buffers in turn, each
  // group's CPU step waiting only for the copies out of its buffer.
  const std::size_t buffers = param_staging_buffers(ctx_.layout, ctx_.device.offload_beside());
  for (std::size_t b = 1; b < buffers; ++b) {
    more_staging_reads_.push_back(ctx_.device.create_event());
  }
  if (ctx_.config.precision == config::Precision::fp16) {
    scaler_ = LossScaler::from_config(ctx_.config.fp16);
  }
  if (modes_.verdict_on_device()) {
    verdict_ = std::make_unique<StepVerdict>(ctx_.device);
    // wall_clock_breakdown's optimizer time from the device's events: no host wait either.
    if (ctx_.config.wall_clock_breakdown)
      optimizer_spans_ = std::make_unique<DeviceSpans>(ctx_.device);
  }
  if (ctx_.config.wall_clock_breakdown && (modes_.stage == 1 || modes_.stage == 2)) {
    allgather_spans_ =
        std::make_unique<DeviceSpans>(ctx_.device, 2 * ctx_.layout.step_groups.size() + 1);
  }
}

void Stepper::create_optimizer(int cpu_threads) {
  optim::Formats formats;
  formats.grad = modes_.grad_shard() ? modes_.accum : modes_.compute;
  formats.state = ctx_.config.optimizer_state_dtype;
  formats.param_out = modes_.mixed ? modes_.compute : DType::bf16;
  formats.copy_out = modes_.mixed;  // fp32: the master is the parameter, nothing is copied out
  if (ctx_.device.type() == DeviceType::cuda && !modes_.optimizer_offload) {
    optimizer_ = optim::create_cuda_optimizer(ctx_.config.optimizer, formats);
  } else {
    optim::CpuOptimizerOptions cpu;
    cpu.threads = cpu_threads > 0 ? cpu_threads : 1;
    host_threads_ = cpu.threads;
    if (modes_.speculate) {
      // super_offload: the optimizer's share of the cores (cpuadam_cores_perc), the rest left
      // to the backward it runs beside.
      const double share = ctx_.config.zero.offload_optimizer.cpuadam_cores_perc;
      cpu.threads = std::max(1, static_cast<int>(std::lround(share * cpu.threads)));
    }
    // As work on the state device's stream: on the CPU device its streams may be threads.
    optimizer_ = optim::create_hosted_cpu_optimizer(state_.state_device(), ctx_.config.optimizer,
                                                    formats, cpu);
  }
  if (modes_.speculate) {
    StepGroups& groups = *this;  // the private base, converted here where it is accessible
    speculation_ =
        std::make_unique<Speculation>(ctx_, state_, groups, *optimizer_, *staging_read_,
                                      grad_flat_count(), ctx_.config.checks_grad_overflow());
  }
}

void Stepper::stop_speculation() noexcept {
  if (speculation_) speculation_->stop();
}

void Stepper::bucket_added(std::size_t bucket) noexcept {
  if (speculation_) speculation_->bucket_added(bucket);
}

void Stepper::arm_speculation() {
  if (speculation_) {
    speculation_->arm(optimizer_steps_ + 1, scaler_.scale(), !reducer_.sums_on_device_ahead());
  }
}

void Stepper::set_learning_rate(double lr) {
  if (speculation_ && speculation_->lr_fixed_while_armed()) {
    const double now = schedule_value(optimizer_steps_ + 1).lr;
    if (lr != now) {
      throw make_error(
          ErrorCategory::usage,
          "set_learning_rate({}) during the backward of an accumulation boundary: "
          "super_offload is already stepping the optimizer with lr {} there, and "
          "without gradient_clipping or an overflow check those steps write "
          "the state in place, with no copy to redo them from; set the learning rate before the "
          "boundary micro-batch's backward (after the last step(), as an LR "
          "scheduler does)",
          lr, now);
    }
  }
  lr_override_ = lr;
}

optim::ScheduleValue Stepper::schedule_value(std::int64_t k) const {
  optim::ScheduleValue value = scheduled(ctx_.config, k);
  if (lr_override_) value.lr = *lr_override_;
  return value;
}

optim::StepHyper Stepper::hyper_for(std::int64_t k, double grad_scale) const {
  const config::Config& config = ctx_.config;
  const optim::ScheduleValue value = schedule_value(k);
  optim::StepHyper hyper;
  hyper.step = k;
  hyper.lr = value.lr;
  hyper.beta1 = value.beta1.value_or(config.optimizer.beta1);
  hyper.beta2 = value.beta2.value_or(config.optimizer.beta2);
  hyper.grad_scale = grad_scale;
  hyper.seed = seed_;
  return hyper;
}

void Stepper::restore(std::int64_t global_steps, std::int64_t optimizer_steps,
                      const LossScaler& scaler, std::uint64_t seed) {
  global_steps_ = global_steps;
  optimizer_steps_ = optimizer_steps;
  scaler_ = scaler;
  seed_ = seed;
}

template <class Visit>
void Stepper::for_each_owned_grad(Visit visit) {
  if (modes_.grad_shard()) {
    if (const std::size_t count = grad_flat_count(); count != 0) {
      visit(state_.grad_flat(), modes_.accum, count);
    }
    return;
  }
  if (const GradReducer::Region region = reducer_.replicated_region(); region.data != nullptr) {
    visit(region.data, modes_.compute, region.count);  // the alignment's gaps are zeros
    return;
  }
  for (std::size_t p : ctx_.layout.trainable) {
    visit(reducer_.grad(p), modes_.compute, ctx_.registry.param(p).numel);
  }
}

void Stepper::queue_grad_scalars(Device& d, Stream& stream, float* sum, float* nonfinite) {
  if (nonfinite != nullptr) d.fill(nonfinite, DType::f32, 1, 0.0f, stream);
  if (sum != nullptr) d.fill(sum, DType::f32, 1, 0.0f, stream);
  for_each_owned_grad([&](const void* data, DType dtype, std::size_t count) {
    if (nonfinite != nullptr) d.check_finite(data, dtype, count, nonfinite, stream);
    if (sum != nullptr) d.sum_squares(data, dtype, count, sum, stream);
  });
}

const void* Stepper::owned_grad_on_host() const {
  return state_.state_device().host_alias(state_.grad_flat());
}

std::size_t Stepper::grad_flat_count() const {
  if (!modes_.grad_shard()) return 0;
  return modes_.grad_nvme ? ctx_.layout.resident_end : ctx_.layout.owned.total;
}

// A scalar the state device wrote at `slot` of its scratch, reduced over the shard group.
// With offload beside a GPU it goes up first: the communicator works in device memory.
float Stepper::reduce_scalar(std::size_t slot, ReduceOp op) {
  float* value = state_.state_scalars(scalars_) + slot;
  state_.state_device().default_stream().synchronize();
  // The state's scalar in host memory and one rank: nothing to reduce. Beside a GPU a copy up
  // and back would wait for the engine's stream and queue behind the parameters going up.
  if (value != scalars_ + slot && modes_.shard_ranks == 1) return *value;
  if (value != scalars_ + slot) ctx_.device.copy(scalars_ + slot, value, sizeof(float));
  Stream& stream = ctx_.device.default_stream();
  if (modes_.shard_ranks > 1) {
    ctx_.shards().all_reduce(scalars_ + slot, 1, DType::f32, op, &stream).wait();
  }
  return read_scalar(ctx_.device, scalars_ + slot);
}

bool Stepper::overflow(const GradPartials* partials) {
  Device& d = state_.state_device();
  Stream& stream = d.default_stream();
  float* flag = state_.state_scalars(scalars_) + 1;
  if (partials != nullptr) {  // taken in backward (the swapped groups' by the GradSwap)
    GradSwap* swap = state_.grad_swap();
    const bool any = partials->any_nonfinite() || (swap != nullptr && swap->any_nonfinite());
    d.fill(flag, DType::f32, 1, any ? 1.0f : 0.0f, stream);
    return reduce_scalar(1, ReduceOp::max) != 0.0f;
  }
  if (const auto sums = reducer_.device_sums()) {  // taken on the device as blocks came down
    const float any = read_scalar(ctx_.device, sums->nonfinite);
    d.fill(flag, DType::f32, 1, any, stream);
    return reduce_scalar(1, ReduceOp::max) != 0.0f;
  }
  queue_grad_scalars(d, stream, /*sum=*/nullptr, flag);
  if (GradSwap* swap = state_.grad_swap(); swap != nullptr && swap->any_nonfinite()) {
    d.fill(flag, DType::f32, 1, 1.0f, stream);
  }
  return reduce_scalar(1, ReduceOp::max) != 0.0f;
}

double Stepper::grad_norm(const GradPartials* partials) {
  Device& d = state_.state_device();
  Stream& stream = d.default_stream();
  float* sum = state_.state_scalars(scalars_);
  if (partials != nullptr) {
    // Taken in backward, block by block as the device's one sum over the shard takes them, and
    // added in the same order: the same float. With gradient NVMe the swapped groups' sums
    // follow, in double, as below.
    double total = partials->sum_squares();
    if (GradSwap* swap = state_.grad_swap(); swap != nullptr) total += swap->sum_squares();
    d.fill(sum, DType::f32, 1, static_cast<float>(total), stream);
  } else if (const auto sums = reducer_.device_sums()) {
    // Beside a GPU, each block's taken on the device before it came down: added in double in
    // the buckets' order, rounded once.
    std::vector<float> squares(sums->count);
    ctx_.device.copy(squares.data(), sums->squares, squares.size() * sizeof(float));
    double total = 0.0;
    for (float s : squares) total += s;
    d.fill(sum, DType::f32, 1, static_cast<float>(total), stream);
  } else if (GradSwap* swap = state_.grad_swap(); swap != nullptr) {
    // Gradient NVMe: the state device is the CPU and the resident part is in host memory. The
    // sums are added in double and rounded once, as the device's one sum over the whole shard
    // is, so the norm is the one the same run without the swap computes.
    stream.synchronize();
    double total = 0.0;
    for_each_owned_grad([&](const void* data, DType dtype, std::size_t count) {
      total += host::sum_squares(data, dtype, count);
    });
    total += swap->sum_squares();
    d.fill(sum, DType::f32, 1, static_cast<float>(total), stream);
  } else if (modes_.optimizer_offload && d.type() == DeviceType::cpu) {
    // The shard in host memory, over the optimizer's threads: the bits the device's sums below
    // give (each region's double sum added to the float accumulator).
    TraceSpan span(ctx_.device.trace(), "host", "norm");
    stream.synchronize();
    float total = 0.0f;
    for_each_owned_grad([&](const void* data, DType dtype, std::size_t count) {
      total = static_cast<float>(total + parallel_sum_squares(data, dtype, count, host_threads_));
    });
    d.fill(sum, DType::f32, 1, total, stream);
  } else {
    queue_grad_scalars(d, stream, sum, /*nonfinite=*/nullptr);
  }
  return std::sqrt(static_cast<double>(reduce_scalar(0, ReduceOp::sum)));
}

std::vector<optim::Slice> Stepper::slices() {
  const Layout& layout = ctx_.layout;
  std::vector<optim::Slice> out;
  out.reserve(layout.trainable.size());
  const std::size_t csize = dtype_size(modes_.compute);
  const std::size_t state_size = dtype_size(ctx_.config.optimizer_state_dtype);
  for (std::size_t p : layout.trainable) {
    const ParamPlacement& place = layout.params[p];
    const GroupSpec& group = ctx_.registry.group(ctx_.registry.param(p).group);
    optim::Slice s;
    // With NVMe a swapped parameter's master and moments are found per step group.
    const bool resident = !modes_.optimizer_nvme || place.flat < layout.resident_end;
    s.master = resident ? state_.master_of(p) : nullptr;
    // With gradient NVMe a swapped parameter's gradient is found per step group too.
    if (!modes_.grad_shard()) {
      s.grad = reducer_.grad(p);
    } else if (!modes_.grad_nvme || place.flat < layout.resident_end) {
      s.grad = static_cast<const char*>(state_.grad_flat()) + place.flat * dtype_size(modes_.accum);
    }
    for (int k = 0; k < 2; ++k) {
      if (state_.moment(k) != nullptr && resident) {
        s.state[k] = static_cast<char*>(state_.moment(k)) + place.flat * state_size;
      }
    }
    // Stage 0 writes the replicated copy, stage 3 the compute shard; stages 1-2 write into
    // the all-gather bucket (set per piece by the caller).
    if (modes_.mixed && modes_.stage == 0) s.param_out = state_.full(p);
    if (modes_.mixed && modes_.stage == 3 && !state_.swapped_param(p)) {
      s.param_out = static_cast<char*>(state_.compute_shard()) + place.compute_flat * csize;
    }
    s.count = state_.owned_valid(p);
    s.weight_decay = group.weight_decay;
    s.lr_scale = group.lr_scale;
    // Stochastic rounding keyed by the element's place in the model, not in this rank's
    // buffer: bf16 optimizer states round the same way at any stage and world size.
    s.first_index = place.global_first + place.shape.begin(modes_.stage == 0 ? 0 : rank_);
    out.push_back(s);
  }
  return out;
}

void Stepper::zero_grads() {
  // The owned shard lazily: the next reduction writes it onto zeros (step() settles it first
  // should no reduction have come).
  reducer_.zero_owned();
  if (state_.grad_swap() != nullptr) state_.grad_swap()->zero();
  reducer_.zero_full(ctx_.device.default_stream());
}

std::optional<StepVerdict::Outcome> Stepper::settle_verdict() {
  if (!verdict_) return std::nullopt;
  std::optional<StepVerdict::Outcome> outcome = verdict_->take();
  if (outcome && outcome->skipped) {
    // The optimizer read the flag on the device and kept the state: the step's count goes back.
    optimizer_steps_ = outcome->step.optimizer_step - 1;
    log::warn(
        "bf16 gradients hold a NaN or an infinity: step {} skipped "
        "(bf16.check_grad_overflow)",
        outcome->step.global_step);
  } else if (outcome) {
    scaler_.update(false);
  }
  return outcome;
}

StepStats Stepper::boundary_stats(std::int64_t k) const {
  StepStats stats;
  stats.stepped = true;
  stats.loss_scale = scaler_.scale();
  // The learning rate this step uses, or on a skipped step the one the schedule still holds.
  stats.lr = schedule_value(k).lr;
  return stats;
}

StepStats Stepper::step() {
  settle_verdict();  // the last boundary's, before this one reads the optimizer's count
  if (verdict_) return step_with_verdict_on_device();
  const config::Config& config = ctx_.config;
  const std::int64_t k = optimizer_steps_ + 1;
  StepStats stats = boundary_stats(k);
  const double scale = stats.loss_scale;

  // The owned gradient as zeros, should no reduction have written it since the last step.
  reducer_.settle_owned(grad_flat_count(), state_.state_device().default_stream());
  // super_offload: every group stepped as speculated before the verdict, the gradient's sums
  // and flags taken in backward; restored unless it stands.
  const bool speculated = speculation_ && speculation_->settle();
  const GradPartials* partials = speculated ? speculation_->partials() : nullptr;
  // fp16 always, bf16 with check_grad_overflow: a step on non-finite gradients is skipped.
  if (config.checks_grad_overflow() && overflow(partials)) {
    if (speculation_) speculation_->skip(speculated);
    if (config.precision == config::Precision::fp16) {
      scaler_.update(true);  // throws at the minimum scale, before any counter moves
      global_steps_ += 1;
      log::info("fp16 gradient overflow: step {} skipped, loss scale {} -> {}", global_steps_,
                scale, scaler_.scale());
    } else {
      global_steps_ += 1;
      log::warn(
          "bf16 gradients hold a NaN or an infinity: step {} skipped "
          "(bf16.check_grad_overflow)",
          global_steps_);
    }
    stats.skipped = true;
    zero_grads();
    return stats;
  }

  global_steps_ += 1;
  const double norm = grad_norm(partials) / scale;
  stats.grad_norm = norm;
  // DeepSpeed's clip coefficient folded into the unscaling (what the device's verdict computes).
  const double grad_scale = optim::step_grad_scale(norm, scale, config.gradient_clipping);

  const optim::StepHyper hyper = hyper_for(k, grad_scale);
  const bool clipped = grad_scale != 1.0 / scale;
  const bool stands = speculation_ && speculation_->verdict(speculated, clipped, hyper.lr);
  // A step over every group reads each group's current copy of the state, where a tail's in-place
  // steps and the flips of those that stood may have left them in different copies.
  if (!stands) state_.unify();

  const std::vector<optim::Slice> all = slices();
  for (std::size_t g = 0; g < ctx_.layout.step_groups.size(); ++g) {
    step_group(g, all, hyper, stands, stands && speculation_->places_early());
  }
  if (state_.swap()) state_.swap()->finish();
  if (state_.param_swap()) state_.param_swap()->finish_writes();  // the next gathers read them
  ctx_.device.default_stream().synchronize();
  optimizer_steps_ = k;
  scaler_.update(false);
  zero_grads();
  fetcher_.release_unheld(/*stale=*/true);
  return stats;
}

// The step with StateModes::verdict_on_device: what the other path decides on the host before
// stepping (skip or not, the norm, the clip factor) the device decides as the optimizer runs,
// from the scalars queued here; the host learns it at settle_verdict.
StepStats Stepper::step_with_verdict_on_device() {
  const config::Config& config = ctx_.config;
  const std::int64_t k = optimizer_steps_ + 1;
  StepStats stats = boundary_stats(k);
  const double scale = stats.loss_scale;

  Stream& stream = ctx_.device.default_stream();
  reducer_.settle_owned(grad_flat_count(), stream);
  float* sum = scalars_;
  float* nonfinite = scalars_ + 1;
  // The optimizer reads both: the flag stays 0 where nothing checks.
  if (!config.checks_grad_overflow()) ctx_.device.fill(nonfinite, DType::f32, 1, 0.0f, stream);
  queue_grad_scalars(ctx_.device, stream, sum, config.checks_grad_overflow() ? nonfinite : nullptr);
  if (modes_.shard_ranks > 1) {
    ctx_.shards().all_reduce(nonfinite, 1, DType::f32, ReduceOp::max, &stream).block(stream);
    ctx_.shards().all_reduce(sum, 1, DType::f32, ReduceOp::sum, &stream).block(stream);
  }

  global_steps_ += 1;
  optim::StepHyper hyper = hyper_for(k, 1.0 / scale);
  hyper.verdict = scalars_;
  hyper.loss_scale = scale;
  hyper.max_norm = config.gradient_clipping;
  const std::vector<optim::Slice> all = slices();
  if (optimizer_spans_) optimizer_spans_->begin(stream);
  for (std::size_t g = 0; g < ctx_.layout.step_groups.size(); ++g) {
    step_group(g, all, hyper, false, false);
  }
  if (optimizer_spans_) optimizer_spans_->end(stream);
  verdict_->queue(scalars_, stream, {global_steps_, k, scale});
  optimizer_steps_ = k;  // until the verdict says the step was skipped
  zero_grads();
  fetcher_.release_unheld(/*stale=*/true);
  stats.verdict_pending = true;
  return stats;
}

void Stepper::step_group(std::size_t group, const std::vector<optim::Slice>& all,
                         const optim::StepHyper& hyper, bool stepped, bool placed) {
  const Layout& layout = ctx_.layout;
  // NVMe: the group's masters and moments come in from the swap for its step; a speculated
  // step that stood has them in its region already and its values in the staging.
  GroupState where;
  where.swapped = group >= layout.resident_groups;
  const bool swap_in = where.swapped && !stepped;
  where.staged = where.swapped && stepped;
  if (swap_in) where.view = state_.swap()->acquire(group - layout.resident_groups);
  GradSwap* grad_swap = swap_in ? state_.grad_swap() : nullptr;
  if (grad_swap != nullptr) where.grad = grad_swap->acquire(group - layout.resident_groups);
  char* out = out_of(group);

  Stream& stream = ctx_.device.default_stream();
  Stream& state_stream = state_.state_device().default_stream();
  Stream& step_stream = modes_.optimizer_offload ? state_stream : stream;
  Timer timer;
  // The CPU writes the staging buffer the copies of the group before last that used it may
  // still read on the device.
  Event& staging_read = staging_read_of(group);
  if (modes_.optimizer_offload) {
    TraceSpan span(ctx_.device.trace(), "host", "wait staging");
    staging_read.synchronize();
  }
  if (!stepped) {
    TraceSpan span(ctx_.device.trace(), "host", "optimizer");
    optimizer_->step(pieces(group, all, where, out), hyper, step_stream);
    if (!optimizer_spans_) {  // else the device's events time it
      if (ctx_.config.wall_clock_breakdown || modes_.optimizer_offload) step_stream.synchronize();
      optimizer_seconds_.add(timer.seconds());
    }
  }

  if (!placed) place(group, all, where, out, stream);
  if (modes_.optimizer_offload) staging_read.record(stream);
  if (swap_in) {
    stream.synchronize();  // the copies above read the buffer the write takes
    state_.swap()->release(group - layout.resident_groups);
    if (grad_swap != nullptr) grad_swap->release(group - layout.resident_groups);
  }
  if (modes_.stage == 1 || modes_.stage == 2) all_gather_group(group);
}

Event& Stepper::staging_read_of(std::size_t group) {
  const std::size_t buffer = group % (1 + more_staging_reads_.size());
  return buffer == 0 ? *staging_read_ : *more_staging_reads_[buffer - 1];
}

char* Stepper::all_gather_block(std::size_t group) {
  const std::size_t csize = dtype_size(modes_.compute);
  return static_cast<char*>(state_.gather_buffer()) +
         static_cast<std::size_t>(rank_) * ctx_.layout.step_groups[group].block * csize;
}

char* Stepper::out_of(std::size_t group) {
  // super_offload with placement after the verdict: each group its own place (speculation.h).
  // Otherwise the boundary's steps take the staging's first buffer, each group after the copies
  // out of it (staging_read_).
  if (speculation_ != nullptr) {
    if (char* own = speculation_->own_out(group); own != nullptr) return own;
  }
  if (modes_.optimizer_offload || modes_.param_nvme) {
    const std::size_t buffer = group % (1 + more_staging_reads_.size());
    return static_cast<char*>(state_.param_staging()) +
           buffer * largest_step_group(ctx_.layout) * dtype_size(modes_.compute);
  }
  if (modes_.stage == 1 || modes_.stage == 2) return all_gather_block(group);
  return nullptr;
}

std::vector<optim::Slice> Stepper::pieces(std::size_t group, const std::vector<optim::Slice>& all,
                                          const GroupState& where, char* out) {
  const Layout& layout = ctx_.layout;
  const Bucket& bucket = layout.step_groups[group];
  const std::size_t csize = dtype_size(modes_.compute);
  const std::size_t state_size = dtype_size(ctx_.config.optimizer_state_dtype);
  const std::size_t grad_size = dtype_size(modes_.grad_shard() ? modes_.accum : modes_.compute);
  const int r = modes_.shard_ranks == 1 ? 0 : rank_;
  const std::size_t block_start = static_cast<std::size_t>(r) * bucket.block;
  std::vector<optim::Slice> pieces;
  for (const BucketPiece& piece : bucket.pieces) {
    const optim::Slice& whole = all[piece.param];
    const std::size_t count = piece_valid(piece, whole.count);
    if (count == 0) continue;
    optim::Slice s = whole;
    const std::size_t at = layout.params[layout.trainable[piece.param]].flat + piece.begin;
    const std::size_t in_view = at - layout.group_lo[group];
    s.master = where.swapped ? where.view.master + in_view : whole.master + piece.begin;
    if (where.grad != nullptr) {
      s.grad = static_cast<const char*>(where.grad) + in_view * grad_size;
    } else if (whole.grad != nullptr) {
      s.grad = static_cast<const char*>(whole.grad) + piece.begin * grad_size;
    }
    for (int m = 0; m < ctx_.config.optimizer.state_buffers(); ++m) {
      s.state[m] = where.swapped ? static_cast<char*>(where.view.state[m]) + in_view * state_size
                                 : static_cast<char*>(whole.state[m]) + piece.begin * state_size;
    }
    if (!modes_.mixed) {
      s.param_out = nullptr;
    } else if (out != nullptr) {
      s.param_out = out + (bucket_position(bucket, piece, r) - block_start) * csize;
    } else {
      s.param_out = static_cast<char*>(whole.param_out) + piece.begin * csize;
    }
    s.count = count;
    s.first_index = whole.first_index + piece.begin;
    pieces.push_back(s);
  }
  return pieces;
}

void Stepper::place(std::size_t group, const std::vector<optim::Slice>& all,
                    const GroupState& where, char* out, Stream& stream) {
  const Layout& layout = ctx_.layout;
  const Bucket& bucket = layout.step_groups[group];
  const std::size_t csize = dtype_size(modes_.compute);
  const int r = modes_.shard_ranks == 1 ? 0 : rank_;
  const std::size_t block_start = static_cast<std::size_t>(r) * bucket.block;
  const bool all_gather_after = modes_.stage == 1 || modes_.stage == 2;
  for (const BucketPiece& piece : bucket.pieces) {
    const std::size_t p = layout.trainable[piece.param];
    const std::size_t count = piece_valid(piece, all[piece.param].count);
    const std::size_t at_block = (bucket_position(bucket, piece, r) - block_start) * csize;
    // The updated compute values the optimizer did not write in place: fp32 masters (the
    // master is the value), or the staging it wrote half copies to.
    const void* from = nullptr;
    if (where.staged) {
      from = out + at_block;
    } else if (!modes_.mixed) {
      const std::size_t at = layout.params[p].flat + piece.begin;
      from = where.swapped ? where.view.master + (at - layout.group_lo[group])
                           : all[piece.param].master + piece.begin;
    } else if (modes_.optimizer_offload || modes_.param_nvme) {
      from = out + at_block;
    }
    if (modes_.stage == 3 && state_.swapped_param(p)) {
      place_on_nvme(p, piece, from, count);
      continue;
    }
    char* to = nullptr;
    if (all_gather_after) {
      to = all_gather_block(group) + at_block;
    } else if (modes_.stage == 3 && layout.params[p].compute_flat != kNone) {
      to = static_cast<char*>(state_.compute_shard()) +
           (layout.params[p].compute_flat + piece.begin) * csize;
    }
    if (count != 0 && from != nullptr && to != nullptr && to != from) {
      ctx_.device.copy_async(to, from, count * csize, stream);
    }
  }
}

// Stage 3, a shard on NVMe: its pieces come in order, assembled whole, written at the last.
void Stepper::place_on_nvme(std::size_t param, const BucketPiece& piece, const void* from,
                            std::size_t count) {
  const std::size_t csize = dtype_size(modes_.compute);
  Stream& stream = ctx_.device.default_stream();
  char* shard = state_.param_swap()->assemble(param);
  if (count != 0 && from != nullptr) {
    ctx_.device.copy_async(shard + piece.begin * csize, from, count * csize, stream);
  }
  if (piece.end == ctx_.layout.params[param].shape.shard) {
    stream.synchronize();
    state_.param_swap()->write_assembled();
  }
}

void Stepper::all_gather_group(std::size_t group) {
  const Layout& layout = ctx_.layout;
  const Bucket& bucket = layout.step_groups[group];
  const std::size_t csize = dtype_size(modes_.compute);
  Stream& stream = ctx_.device.default_stream();
  // The copies out of the gather buffer below, and the next group's writes into it, are ordered
  // after the all-gather on the stream: the host does not wait for it (NCCL; MPI on the CPU waits
  // on the host inside block()).
  Timer timer;
  if (allgather_spans_) allgather_spans_->begin(stream);
  ctx_.shards()
      .all_gather(all_gather_block(group), state_.gather_buffer(), bucket.block, modes_.compute,
                  &stream)
      .block(stream);
  if (allgather_spans_) {
    allgather_spans_->end(stream);
  } else {
    allgather_seconds_.add(timer.seconds());
  }
  const char* buffer = static_cast<const char*>(state_.gather_buffer());
  for (const BucketPiece& piece : bucket.pieces) {
    const std::size_t p = layout.trainable[piece.param];
    const ShardShape& shape = layout.params[p].shape;
    for (int q = 0; q < modes_.shard_ranks; ++q) {
      const std::size_t count = piece_valid(piece, shape.valid(q));
      if (count == 0) continue;
      ctx_.device.copy_async(
          static_cast<char*>(state_.full(p)) + (shape.begin(q) + piece.begin) * csize,
          buffer + bucket_position(bucket, piece, q) * csize, count * csize, stream);
    }
  }
}

}  // namespace zero::engine
