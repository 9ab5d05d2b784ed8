// The optimizer step at an accumulation boundary (docs/design.md, "The step"): the non-finite
// check agreed across ranks (fp16 always, bf16 with check_grad_overflow) and the skip; the
// global gradient norm from the owned shards only; clipping and unscaling folded into the
// optimizer's gradient scale; the learning-rate schedule; the optimizer over the owned flat
// buffers, step group by step group; and where each group's updated compute values go, one
// function per placement: the all-gather bucket and back into the replicated copies (stages
// 1-2), the replicated copy in place (stage 0), the compute shards in memory or assembled on
// NVMe (stage 3), through the pinned staging when the optimizer runs on the CPU (a group's
// CPU step waits for the copies of the previous group's values out of it).
//
// With super_offload (modes.speculate) the groups are stepped during the boundary's backward by
// the Speculator's worker, each resident group keeping its pre-step masters and moments (a
// swapped group's step reads its current region on NVMe and writes the other, with its
// gradient held in the GradSwap), writing its updated values to the staging and taking its
// part of the gradient's sum of squares and non-finite check (GradPartials; the GradSwap's
// hold for swapped groups); at the boundary the verdict keeps them (no skip, and the clip
// coefficient leaves the gradient scale as speculated) or restores them and steps again with
// the right scale (or not at all, on a skip). At stage 3 with the compute shards in memory each
// group is placed in backward and placed again after a rollback; otherwise the placement runs
// after the verdict, so the compute copies never see a speculated value that did not stand.
//
// Owns: the optimizer, the loss scaler, the step counters (global steps, skipped ones
// included; optimizer steps, not skipped), the rounding seed and the Speculator. Calls: the
// ModelState (its buffers and swaps), the GradReducer (gradients at stage 0, zeroing), the
// ParamFetcher (stale gathered copies released), the device and the communicator. Streams: the
// device's default stream; the CPU's default stream with optimizer offload, and a CPU stream of
// its own for the speculated steps. Internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "base/timer.h"
#include "engine/engine.h"
#include "engine/engine_context.h"
#include "engine/fetching/param_fetcher.h"
#include "engine/gradients/grad_partials.h"
#include "engine/gradients/grad_reducer.h"
#include "engine/state/model_state.h"
#include "engine/stepping/loss_scaler.h"
#include "engine/stepping/speculator.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace zero::engine {

// The schedule's values for the k-th optimizer step of the run (k >= 1, skipped steps not
// counted): the config's scheduler at its iteration, over the optimizer's lr.
optim::ScheduleValue scheduled(const config::Config& config, std::int64_t k);

class Stepper {
 public:
  // `scalars`: the engine's device scratch ([0] sum of squares, [1] non-finite flag).
  Stepper(const EngineContext& context, ModelState& state, GradReducer& reducer,
          ParamFetcher& fetcher, float* scalars, std::uint64_t seed);

  // The optimizer for the formats the state holds (at init, after allocation).
  void create_optimizer(int cpu_threads);
  const optim::Optimizer& optimizer() const { return *optimizer_; }

  // The boundary's step; a failure part way leaves the state half updated (the caller marks
  // the engine failed).
  StepStats step();
  // Every gradient the optimizer reads back to zero (after a step, a skip or a load).
  void zero_grads();

  const LossScaler& scaler() const noexcept { return scaler_; }
  std::int64_t global_steps() const noexcept { return global_steps_; }
  std::int64_t optimizer_steps() const noexcept { return optimizer_steps_; }
  std::uint64_t seed() const noexcept { return seed_; }
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
  // super_offload: the speculation's counts (null without it).
  const Speculator* speculator() const noexcept { return speculator_.get(); }

  // Seconds in the optimizer kernels and (stages 1-2) the updated shards' all-gather since the
  // last call; the speculated steps' seconds (in backward) apart.
  double take_optimizer_seconds() { return optimizer_seconds_.take(); }
  double take_speculation_seconds() { return speculation_seconds_.take(); }
  double take_allgather_seconds() { return allgather_seconds_.take(); }

 private:
  // Where a step group's state is for its step: resident in memory, or a swapped group's view.
  struct GroupState {
    bool swapped = false;
    GroupView view;
    const void* grad = nullptr;  // gradient NVMe: the group's gradient, from the GradSwap
    // The updated compute values are in the staging (`out`), also in fp32: a swapped group's
    // speculated step that stood, whose masters are on NVMe.
    bool staged = false;
  };

  // Over the owned gradient, or from what the speculation took in backward (partials).
  bool overflow(const GradPartials* partials);
  double grad_norm(const GradPartials* partials);
  // The owned gradient shard where host code reaches it (super_offload: on the state device,
  // the CPU).
  const void* owned_grad_on_host() const;
  float reduce_scalar(std::size_t slot, ReduceOp op);
  // The owned gradient shard's elements in memory (with gradient NVMe, the resident groups').
  std::size_t grad_flat_count() const;
  // Calls visit(data, dtype, count) for the gradients in memory the optimizer reads on this
  // rank (the GradSwap's aside).
  template <class Visit>
  void for_each_owned_grad(Visit visit);
  std::vector<optim::Slice> slices();  // one per trainable parameter, over its owned shard

  optim::StepHyper hyper_for(std::int64_t k, double grad_scale) const;
  // `stepped`: speculated and standing, so only placed (`placed`: not even that, done in
  // backward).
  void step_group(std::size_t group, const std::vector<optim::Slice>& all,
                  const optim::StepHyper& hyper, bool stepped, bool placed);
  // A skip after early placement: every group's compute values again from the restored masters.
  void place_restored();
  // On the Speculator's worker: the group's state kept (resident) or its step written to the
  // other region (swapped), stepped as speculated; `out` is its place in the staging.
  void speculate_group(std::size_t group);
  void speculate_swapped(std::size_t group, char* out);
  // fp32: a swapped group's updated masters into its place in the staging.
  void stage_masters(std::size_t group, const GroupState& where, char* out);
  // The speculated groups restored (resident: from the backup; swapped: their other regions
  // dropped), or the swapped ones' other regions made current.
  void roll_back();
  void keep_swapped();
  // Puts group `group`'s masters and moments back from the backup its speculated step kept.
  void restore_group_state(std::size_t group);
  // The group's pieces as speculated, each with where its pre-step values are kept.
  std::vector<optim::Slice> kept_pieces(std::size_t group, char* out);
  // This group's pieces as the optimizer takes them; `out` is where it writes half copies
  // (null: each slice's own param_out).
  std::vector<optim::Slice> pieces(std::size_t group, const std::vector<optim::Slice>& all,
                                   const GroupState& where, char* out);
  // Where the optimizer writes this group's half copies: the pinned staging (the optimizer on
  // the CPU, or shards on NVMe), this rank's block of the all-gather bucket (stages 1-2), or
  // nowhere common (null: in place).
  char* out_of(std::size_t group);
  char* all_gather_block(std::size_t group);
  // The updated values the optimizer did not write in place, to where they live: one
  // function per placement.
  void place(std::size_t group, const std::vector<optim::Slice>& all, const GroupState& where,
             char* out, Stream& stream);
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
  LossScaler scaler_ = LossScaler::fixed(1.0);
  std::int64_t global_steps_ = 0;
  std::int64_t optimizer_steps_ = 0;  // not skipped: the optimizer's and the schedule's count
  std::uint64_t seed_;
  SecondsSum optimizer_seconds_, allgather_seconds_, speculation_seconds_;
  // super_offload: what the armed boundary's speculated steps use.
  std::vector<std::size_t> staging_offsets_;  // per group, in the staging (elements)
  std::vector<std::pair<std::size_t, std::size_t>> group_ranges_;  // owned [begin, end)
  std::vector<optim::Slice> speculation_slices_;
  optim::StepHyper speculation_hyper_;
  std::unique_ptr<Stream> speculation_stream_;
  std::unique_ptr<GradPartials> partials_;  // the norm and the non-finite check, in backward
  // Stage 3 (compute shards in memory): each speculated group placed in backward, on this
  // device stream, waited for at the boundary, from the staging's buffers in turn (each free
  // once the event recorded after its copies has passed: early_staging_buffers).
  bool early_placement_ = false;
  std::unique_ptr<Stream> placement_stream_;
  std::vector<std::unique_ptr<Event>> staging_free_;
  std::size_t speculated_ = 0;  // groups the worker has taken this boundary
  // NVMe: the swapped groups (as the swap numbers them) in the order the worker takes them.
  std::vector<std::size_t> swap_order_;
  std::unique_ptr<Speculator> speculator_;  // last: its worker ends before the rest goes
};

}  // namespace zero::engine
