// super_offload's steps (docs/offload.md, "The overlapped step"): in the boundary micro-step's
// backward each step group is stepped on the Speculator's worker as soon as its gradient is
// final, a resident group's step reading the copy of its masters and moments that is current for
// it and writing the other (ModelState::copy_of; a swapped group's step reads its current region
// on NVMe and writes the other, with its gradient held in the GradSwap), writing its updated
// values to the staging and taking its part of the gradient's sum of squares and non-finite
// check (GradPartials; the GradSwap's hold for swapped groups). At the boundary the Stepper's
// verdict keeps them (no skip, and the clip coefficient and the schedule leave the step as
// speculated: each stepped group's other copy made its current one, ModelState::flip) or drops
// them (the current copies, only read, stay current), and the Stepper steps again with the right
// scale (or not at all, on a skip).
// At stage 3 with the compute shards in memory each group is placed in backward and placed again
// after a rollback; otherwise the placement runs after the verdict, so the compute copies never see
// a speculated value that did not stand. Where every group is resident and placed early from memory
// beside a GPU, the boundary does not wait for the groups the worker has not reached (the step's
// tail; the sums it has not taken are taken beside it): the next forward's gathers wait for each
// (await_param), everything else for all of them (drain). With a second copy, a verdict that
// keeps the steps flips the groups stepped into it, and the worker steps the groups it takes after
// the verdict in place (their copy stays current: no second copy's cost for the tail); one that
// drops them drops the groups the worker has not taken and waits for the one it runs.
//
// Owns: the Speculator and its worker, the speculation's stream, the partial norm and check,
// each group's place in the staging, the early placement's stream, the events that free its
// buffers and those after each group's placement (the tail's gathers wait on them). Calls: the
// Stepper's group machinery (step_groups.h), the optimizer, the ModelState (its two copies of the
// state, swaps and staging). Streams: a CPU stream of its own for the speculated steps, a device
// stream of its own for the early placement. Internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "base/timer.h"
#include "engine/engine_context.h"
#include "engine/gradients/grad_partials.h"
#include "engine/state/model_state.h"
#include "engine/stepping/speculator.h"
#include "engine/stepping/step_groups.h"
#include "optim/optimizer.h"

namespace zero::engine {

class Speculation {
 public:
  // At init, after the optimizer is made. `checked`: the verdict checks for non-finite
  // gradients (fp16, or bf16 with check_grad_overflow); `staging_read`: the Stepper's event
  // after the copies out of the staging.
  Speculation(const EngineContext& context, ModelState& state, StepGroups& groups,
              optim::Optimizer& optimizer, Event& staging_read, std::size_t grad_flat_count,
              bool checked);

  // The boundary micro-step's backward begins: arms the speculation of the k-th optimizer
  // step at this loss scale (unless the policy holds it off). `take_sums`: the gradient's sums
  // and flags are taken here, on the worker (false: the device takes them as the reduced
  // blocks come down, GradReducer::device_sums).
  void arm(std::int64_t k, double loss_scale, bool take_sums);
  // In the reductions' epilogue order: bucket `bucket` is in the owned gradient.
  void bucket_added(std::size_t bucket) noexcept;
  // Ends the worker (the engine's teardown, before the parts it uses go).
  void stop() noexcept;

  // At the boundary: every speculated step finished and the gradient's sums and flags complete;
  // whether anything was speculated this boundary. Where the next forward's gathers read the
  // compute shards (leaves_tail), the groups not yet stepped are left to the worker instead:
  // await_param() and drain() wait for them (and skip() and a verdict that drops the steps).
  bool settle();
  // After a settle() that left groups to the worker: waits until those holding parameter
  // `param`'s owned shard are stepped and makes `stream` wait for their placement; rethrows a
  // step's failure. Returns at once otherwise.
  void await_param(std::size_t param, Stream& stream);
  // Every group left to the worker stepped and placed; rethrows a step's failure.
  void drain();
  // Between a settle() that left groups to the worker and drain().
  bool tail_pending() const noexcept { return tail_; }
  // After a settle() that speculated: the sums and flags taken on the worker, or null where
  // arm() was told the device takes them.
  const GradPartials* partials() const noexcept;
  // Armed for steps that keep no second copy (StateModes::speculation_rollback false): the learning
  // rate they took may not change until the step.
  bool lr_fixed_while_armed() const;
  // A skipped step: the speculated steps undone, and their early placement with them.
  void skip(bool speculated);
  // The step goes on with `lr` and its gradient scale `clipped` or not: whether the speculated
  // steps stand (kept: their copy made current) or not (dropped, to be stepped again).
  bool verdict(bool speculated, bool clipped, double lr);
  bool places_early() const noexcept { return early_placement_; }
  // Where group `group`'s half copies go while speculating with placement after the verdict
  // (each group its own place in the staging); null otherwise.
  char* own_out(std::size_t group) const;

  const Speculator& speculator() const noexcept { return *speculator_; }
  // Tests (FaultHooks::speculated_step): called on the worker before each group's step.
  void set_before_step(std::function<void(std::size_t group)> hook) {
    before_step_ = std::move(hook);
  }
  // The worker's seconds so far (a step's tail adds to them after its step() returned).
  double take_seconds() {
    std::lock_guard lock(seconds_mutex_);
    return seconds_.take();
  }

 private:
  // On the Speculator's worker: the group stepped as speculated, into the other copy of its
  // state (resident, with a rollback) or region (swapped); `out` is its place in the staging.
  void speculate_group(std::size_t group);
  void speculate_swapped(std::size_t group, char* out);
  // fp32: a swapped group's updated masters into its place in the staging.
  void stage_masters(std::size_t group, const GroupState& where, char* out);
  // This boundary's groups may be left to the worker past the step: every group is resident
  // and placed early, beside a GPU (or a stand-in: on the CPU device the worker would take the
  // cores the next forward computes on). A rollback, should the verdict need one, waits for
  // them.
  bool leaves_tail() const;
  // The speculated groups' steps dropped (resident: the current copy they read stays current;
  // swapped: their other regions dropped).
  void roll_back();
  // A tail left before a verdict that drops its steps: the groups the worker has not taken
  // are not stepped, the one it runs and the placements under way are waited for.
  void drop_tail();
  // The group's pieces read from copy `from` of the state and written to copy `to` (the same:
  // in place).
  std::vector<optim::Slice> between_copies(std::size_t group, int from, int to, char* out);
  const std::vector<optim::Slice>& copy_slices(int copy) const {
    return copy == 0 ? slices_ : written_;
  }
  // After a skip with early placement: every group's compute values again from the current
  // masters (which the dropped steps only read).
  void place_restored();

  const EngineContext ctx_;
  ModelState& state_;
  StepGroups& groups_;
  optim::Optimizer& optimizer_;
  Event& staging_read_;
  const StateModes& modes_;
  const int rank_;                            // in the shard group (EngineContext::shards)
  std::vector<std::size_t> staging_offsets_;  // per group, in the staging (elements)
  std::vector<std::pair<std::size_t, std::size_t>> group_ranges_;  // owned [begin, end)
  std::vector<optim::Slice> slices_;  // the armed boundary's, over copy 0 of the state
  optim::StepHyper hyper_;            // and its step as speculated
  // With a rollback: the state's two copies (ModelState::state_copy) as they were at arm(), the
  // slices over copy 1, the copy each resident group's current values were in at arm(), and
  // which groups the worker stepped into the other copy (before the verdict). After a verdict
  // that keeps the steps (in_place_) the groups it takes step in place.
  void* copy_base_[2][3] = {{nullptr, nullptr, nullptr}, {nullptr, nullptr, nullptr}};
  std::vector<optim::Slice> written_;
  std::vector<std::uint8_t> current_;
  std::vector<std::uint8_t> into_other_;
  std::mutex mode_mutex_;  // in_place_ and into_other_: the worker's choice against verdict()
  bool in_place_ = false;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<GradPartials> partials_;  // the norm and the non-finite check, in backward
  // Stage 3 (compute shards in memory): each speculated group placed in backward, on this
  // device stream, waited for at the boundary, from the staging's buffers in turn (each free
  // once the event recorded after its copies has passed: early_staging_buffers).
  bool early_placement_ = false;
  std::unique_ptr<Stream> placement_stream_;
  std::vector<std::unique_ptr<Event>> staging_free_;
  // Placed early: per group, recorded on the placement stream after its placement (what a
  // gather of its parameters waits for while the worker has the step's tail).
  std::vector<std::unique_ptr<Event>> placed_;
  std::vector<std::vector<std::size_t>> param_groups_;  // per parameter: the groups holding it
  bool tail_ = false;  // settle() left groups to the worker; until drain()
  // The partials' group_final() on the worker against settle()'s finish() beside a tail: once
  // closed (at the boundary) the worker takes no more sums.
  std::mutex sums_mutex_;
  bool sums_closed_ = false;
  std::function<void(std::size_t)> before_step_;  // set_before_step's
  std::size_t speculated_ = 0;                    // groups the worker has taken this boundary
  bool take_sums_ = true;                         // the armed boundary's sums on the worker (arm)
  // NVMe: the swapped groups (as the swap numbers them) in the order the worker takes them.
  std::vector<std::size_t> swap_order_;
  std::mutex seconds_mutex_;  // seconds_: the worker adds while the tail runs, the step takes
  SecondsSum seconds_;
  std::unique_ptr<Speculator> speculator_;  // last: its worker ends before the rest goes
};

}  // namespace zero::engine
