// The optimizer step at an accumulation boundary (docs/design.md, "The step"): the non-finite
// check agreed across ranks (fp16 always, bf16 with check_grad_overflow) and the skip; the
// global gradient norm from the owned shards only; clipping and unscaling folded into the
// optimizer's gradient scale; the learning-rate schedule; the optimizer over the owned flat
// buffers, step group by step group; and where each group's updated compute values go, one
// function per placement: the all-gather bucket and back into the replicated copies (stages
// 1-2), the replicated copy in place (stage 0), the compute shards in memory or assembled on
// NVMe (stage 3), through the pinned staging when the optimizer runs on the CPU (a group's
// CPU step waits for the copies of the values out of its buffer: beside a GPU two buffers in
// turn, so a group's step runs while the group before it goes up).
//
// With super_offload (modes.speculate) the groups are stepped during the boundary's backward
// (speculation.h), and the verdict here keeps those steps or has them undone and steps again:
// the Stepper reads the same with it or without.
//
// Owns: the optimizer, the loss scaler, the step counters (global steps, skipped ones
// included; optimizer steps, not skipped), the rounding seed and the Speculation. Calls: the
// ModelState (its buffers and swaps), the GradReducer (gradients at stage 0, zeroing), the
// ParamFetcher (stale gathered copies released), the device and the communicator. Streams: the
// device's default stream; the CPU's default stream with optimizer offload, and a CPU stream of
// its own for the speculated steps. Internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "base/timer.h"
#include "engine/engine.h"
#include "engine/engine_context.h"
#include "engine/fetching/param_fetcher.h"
#include "engine/gradients/grad_partials.h"
#include "engine/gradients/grad_reducer.h"
#include "engine/state/model_state.h"
#include "engine/stepping/device_spans.h"
#include "engine/stepping/loss_scaler.h"
#include "engine/stepping/speculation.h"
#include "engine/stepping/speculator.h"
#include "engine/stepping/step_groups.h"
#include "engine/stepping/step_verdict.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace zero::engine {

// The schedule's values for the k-th optimizer step of the run (k >= 1, skipped steps not
// counted): the config's scheduler at its iteration, over the optimizer's lr.
optim::ScheduleValue scheduled(const config::Config& config, std::int64_t k);

class Stepper final : private StepGroups {
 public:
  // `scalars`: the engine's device scratch ([0] sum of squares, [1] non-finite flag).
  Stepper(const EngineContext& context, ModelState& state, GradReducer& reducer,
          ParamFetcher& fetcher, float* scalars, std::uint64_t seed);

  // The optimizer for the formats the state holds (at init, after allocation).
  void create_optimizer(int cpu_threads);
  const optim::Optimizer& optimizer() const { return *optimizer_; }

  // The boundary's step; a failure part way leaves the state half updated (the caller marks
  // the engine failed). With the verdict on the device (StateModes::verdict_on_device) the
  // stats' skipped and grad_norm are not known yet (StepStats::verdict_pending): settle_verdict
  // gives them, and settles the last boundary's first thing here.
  StepStats step();
  // With the verdict on the device: waits for the last boundary's, if still pending, and
  // applies it (a skipped step's optimizer count taken back, its warning logged). Call before
  // reading optimizer_steps() or the scaler, saving or loading. nullopt when none was pending.
  std::optional<StepVerdict::Outcome> settle_verdict();
  // The pinned bytes the verdict on the device holds (Engine::reserved_bytes).
  std::size_t pinned_scratch_bytes() const noexcept {
    return verdict_ ? StepVerdict::pinned_bytes() : 0;
  }
  // Every gradient the optimizer reads back to zero (after a step, a skip or a load).
  void zero_grads();

  const LossScaler& scaler() const noexcept { return scaler_; }
  std::int64_t global_steps() const noexcept { return global_steps_; }
  std::int64_t optimizer_steps() const noexcept { return optimizer_steps_; }
  std::uint64_t seed() const noexcept { return seed_; }
  // The schedule's values for the k-th optimizer step, its lr the caller's where one was set.
  optim::ScheduleValue schedule_value(std::int64_t k) const;
  // The learning rate of every optimizer step from the next on, in place of the config's (a
  // schedule the caller runs; not in checkpoints).
  // From the next step on. Refused while super_offload steps that keep no second copy run with
  // the current one (Speculation::lr_fixed_while_armed) and `lr` differs from it.
  void set_learning_rate(double lr);
  // A checkpoint's counters, scaler and seed.
  void restore(std::int64_t global_steps, std::int64_t optimizer_steps, const LossScaler& scaler,
               std::uint64_t seed);

  // super_offload: the boundary micro-step's backward begins; arms the speculation of its step
  // (unless the policy holds it off).
  void arm_speculation();
  // super_offload, in the reductions' epilogue order: bucket `bucket` is in the owned gradient.
  void bucket_added(std::size_t bucket) noexcept;
  // Ends the speculation's worker (the engine's teardown, before the parts it uses go).
  void stop_speculation() noexcept;
  // super_offload, where step() left the last groups to the worker (Speculation::settle): the
  // next forward's gather of `param` waits for its groups (`stream` for their placement), and
  // anything else that reads or writes the state, the gradients or the step's counters waits
  // for all of them (drain_speculation). Rethrow a step's failure. No-ops otherwise.
  void await_param(std::size_t param, Stream& stream) {
    if (speculation_) speculation_->await_param(param, stream);
  }
  void drain_speculation() {
    if (speculation_) speculation_->drain();
  }
  // Tests (FaultHooks::speculated_step), after create_optimizer.
  void set_before_speculated_step(std::function<void(std::size_t group)> hook) {
    if (speculation_) speculation_->set_before_step(std::move(hook));
  }
  bool speculation_tail_pending() const noexcept {
    return speculation_ && speculation_->tail_pending();
  }
  // super_offload: the speculation's counts (null without it).
  const Speculator* speculator() const noexcept {
    return speculation_ ? &speculation_->speculator() : nullptr;
  }

  // Seconds in the optimizer kernels and (stages 1-2) the updated shards' all-gather since the
  // last call; the speculated steps' seconds (in backward) apart. With the verdict on the
  // device and wall_clock_breakdown, the optimizer's from the device's events, of the steps it
  // has finished (a step still running is counted at a later call).
  double take_optimizer_seconds() {
    return optimizer_seconds_.take() + (optimizer_spans_ ? optimizer_spans_->take_finished() : 0.0);
  }
  double take_speculation_seconds() { return speculation_ ? speculation_->take_seconds() : 0.0; }
  double take_allgather_seconds() {
    return allgather_seconds_.take() + (allgather_spans_ ? allgather_spans_->take_finished() : 0.0);
  }

 private:
  // Over the owned gradient, or from what the speculation took in backward (partials).
  bool overflow(const GradPartials* partials);
  double grad_norm(const GradPartials* partials);
  // The owned gradient shard where host code reaches it (super_offload: on the state device,
  // the CPU).
  const void* owned_grad_on_host() const override;
  // The state's scalar `slot` (written on the state device) reduced over the shard group by
  // `op`, on the host; at one rank with the state in host memory read where it is.
  float reduce_scalar(std::size_t slot, ReduceOp op);
  // The owned gradient shard's elements in memory (with gradient NVMe, the resident groups').
  std::size_t grad_flat_count() const;
  // Calls visit(data, dtype, count) for the gradients in memory the optimizer reads on this
  // rank (the GradSwap's aside).
  template <class Visit>
  void for_each_owned_grad(Visit visit);
  // Queues on `d`'s `stream`, over the gradients for_each_owned_grad visits, their sum of
  // squares into *sum and their non-finite flag into *nonfinite, each started at 0; either may
  // be null (not taken). One pass for both: the device's own check and sum, whether the host
  // reads them (overflow, grad_norm) or the optimizer does (step_with_verdict_on_device).
  void queue_grad_scalars(Device& d, Stream& stream, float* sum, float* nonfinite);
  std::vector<optim::Slice> slices() override;  // one per trainable parameter, its owned shard

  optim::StepHyper hyper_for(std::int64_t k, double grad_scale) const override;
  StepStats step_with_verdict_on_device();
  // What both ways of stepping report before their verdict: stepped, the loss scale, the lr
  // of optimizer step k.
  StepStats boundary_stats(std::int64_t k) const;
  // `stepped`: speculated and standing, so only placed (`placed`: not even that, done in
  // backward).
  void step_group(std::size_t group, const std::vector<optim::Slice>& all,
                  const optim::StepHyper& hyper, bool stepped, bool placed);
  // This group's pieces as the optimizer takes them; `out` is where it writes half copies
  // (null: each slice's own param_out).
  std::vector<optim::Slice> pieces(std::size_t group, const std::vector<optim::Slice>& all,
                                   const GroupState& where, char* out) override;
  // Where the optimizer writes this group's half copies: the pinned staging (the optimizer on
  // the CPU, or shards on NVMe), this rank's block of the all-gather bucket (stages 1-2), or
  // nowhere common (null: in place).
  char* out_of(std::size_t group) override;
  char* all_gather_block(std::size_t group);
  Event& staging_read_of(std::size_t group);
  // The updated values the optimizer did not write in place, to where they live: one
  // function per placement.
  void place(std::size_t group, const std::vector<optim::Slice>& all, const GroupState& where,
             char* out, Stream& stream) override;
  void place_on_nvme(std::size_t param, const BucketPiece& piece, const void* from,
                     std::size_t count);
  // Stages 1-2: the all-gather of the updated shards, back into the replicated copies.
  void all_gather_group(std::size_t group);

  const EngineContext ctx_;
  ModelState& state_;
  GradReducer& reducer_;
  ParamFetcher& fetcher_;
  float* scalars_;
  const StateModes& modes_;
  const int rank_;  // in the shard group (EngineContext::shards)
  std::unique_ptr<optim::Optimizer> optimizer_;
  // Optimizer offload: recorded on the device's stream after the copies out of the pinned
  // staging (place()); the host waits for it before the CPU optimizer writes the staging again.
  std::unique_ptr<Event> staging_read_;
  // Beside a GPU, the second staging buffer's (kParamStagingBuffers): group g uses buffer
  // g % buffers, whose event is staging_read_of(g).
  std::vector<std::unique_ptr<Event>> more_staging_reads_;
  LossScaler scaler_ = LossScaler::fixed(1.0);
  std::int64_t global_steps_ = 0;
  std::int64_t optimizer_steps_ = 0;  // not skipped: the optimizer's and the schedule's count
  std::uint64_t seed_;
  int host_threads_ = 1;               // the CPU optimizer's threads (the host norm's)
  std::optional<double> lr_override_;  // set_learning_rate's
  SecondsSum optimizer_seconds_, allgather_seconds_;
  // With the verdict on the device (null otherwise): the pending step's, and with
  // wall_clock_breakdown the optimizer's spans timed by the device.
  std::unique_ptr<StepVerdict> verdict_;
  std::unique_ptr<DeviceSpans> optimizer_spans_;
  // Stages 1-2 with wall_clock_breakdown: each group's all-gather timed by the device, room for
  // two steps' worth in flight (null otherwise: host time).
  std::unique_ptr<DeviceSpans> allgather_spans_;
  // super_offload (null without it); last: its worker ends before the rest goes.
  std::unique_ptr<Speculation> speculation_;
};

}  // namespace zero::engine
