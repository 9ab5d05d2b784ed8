// super_offload's steps during backward and their verdict's consequences (see speculation.h).
#include "engine/stepping/speculation.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "device/trace.h"
#include "engine/plan/memory_plan.h"

namespace zero::engine {

Speculation::Speculation(const EngineContext& context, ModelState& state, StepGroups& groups,
                         optim::Optimizer& optimizer, Event& staging_read,
                         std::size_t grad_flat_count, bool checked)
    : ctx_(context),
      state_(state),
      groups_(groups),
      optimizer_(optimizer),
      staging_read_(staging_read),
      modes_(context.layout.modes),
      rank_(context.shards().rank()) {
  const Layout& layout = ctx_.layout;
  staging_offsets_ = speculation_staging_offsets(layout);
  for (const Bucket& group : layout.step_groups) {
    std::size_t begin = kNone, end = 0;
    for (const BucketPiece& piece : group.pieces) {
      const std::size_t flat = layout.params[layout.trainable[piece.param]].flat;
      begin = std::min(begin, flat + piece.begin);
      end = std::max(end, flat + piece.end);
    }
    group_ranges_.emplace_back(begin == kNone ? 0 : begin, end);
  }
  stream_ = state_.state_device().create_stream();
  partials_ = std::make_unique<GradPartials>(group_ranges_, grad_flat_count, checked);
  // Stage 3 places each speculated group at once: local copies, no collective whose order
  // the ranks must agree on (stages 1-2 all-gather), and no NVMe write.
  early_placement_ = speculation_places_early(modes_);
  if (early_placement_) {
    placement_stream_ = ctx_.device.create_stream();
    for (std::size_t b = 0; b < early_staging_buffers(layout); ++b) {
      staging_free_.push_back(ctx_.device.create_event());
    }
    param_groups_.resize(layout.params.size());
    for (std::size_t g = 0; g < layout.step_groups.size(); ++g) {
      placed_.push_back(ctx_.device.create_event());
      for (const BucketPiece& piece : layout.step_groups[g].pieces) {
        std::vector<std::size_t>& groups = param_groups_[layout.trainable[piece.param]];
        if (groups.empty() || groups.back() != g) groups.push_back(g);
      }
    }
  }
  speculator_ = std::make_unique<Speculator>(layout);
  if (state_.swap() != nullptr) {
    for (std::size_t g : speculator_->order()) {
      if (g >= layout.resident_groups) swap_order_.push_back(g - layout.resident_groups);
    }
  }
}

void Speculation::stop() noexcept {
  speculator_->stop();
}

void Speculation::bucket_added(std::size_t bucket) noexcept {
  speculator_->bucket_added(bucket);
}

void Speculation::arm(std::int64_t k, double loss_scale, bool take_sums) {
  drain();  // the last boundary's tail, before anything of this one is set
  // The boundary's step as it will be unless the verdict says otherwise: its schedule, and the
  // gradient scale of a step without clipping.
  slices_ = groups_.slices();
  hyper_ = groups_.hyper_for(k, 1.0 / loss_scale);
  // The two copies of the state as they are now (the verdict may rename them while the worker
  // still steps the tail), and the copy each resident group's current values are in.
  for (int c = 0; c < 2; ++c) {
    for (std::size_t i = 0; i < 3; ++i) copy_base_[c][i] = state_.state_copy(c, i);
  }
  const std::size_t resident = ctx_.layout.resident_groups;
  current_.assign(resident, 0);
  for (std::size_t g = 0; g < resident; ++g) {
    current_[g] = static_cast<std::uint8_t>(state_.copy_of(g));
  }
  into_other_.assign(resident, 0);
  in_place_ = false;
  written_.clear();
  if (modes_.speculation_rollback) {
    const std::size_t state_size = dtype_size(ctx_.config.optimizer_state_dtype);
    const auto* master0 = static_cast<const float*>(copy_base_[0][0]);
    for (optim::Slice s : slices_) {
      if (s.master != nullptr) {  // resident
        const auto at = static_cast<std::size_t>(s.master - master0);
        s.master = static_cast<float*>(copy_base_[1][0]) + at;
        for (int m = 0; m < ctx_.config.optimizer.state_buffers(); ++m) {
          s.state[m] =
              static_cast<char*>(copy_base_[1][1 + static_cast<std::size_t>(m)]) + at * state_size;
        }
      }
      written_.push_back(s);
    }
  }
  partials_->begin();
  take_sums_ = take_sums;
  sums_closed_ = false;  // the worker has no group of this boundary yet
  speculated_ = 0;
  OptimizerSwap* swap = state_.swap();
  if (swap != nullptr) swap->begin_speculation(swap_order_);
  const bool armed = speculator_->arm([this](std::size_t group) { speculate_group(group); },
                                      /*newest_first=*/leaves_tail());
  if (!armed && swap != nullptr) swap->end_speculation(/*keep=*/false);
}

bool Speculation::leaves_tail() const {
  return early_placement_ && ctx_.device.offload_beside() && state_.swap() == nullptr &&
         state_.grad_swap() == nullptr;
}

bool Speculation::settle() {
  if (!speculator_->armed()) return false;
  if (leaves_tail()) {
    speculator_->hand_over();
    tail_ = true;
    if (take_sums_) {
      // The norm is the step's (its stats): the blocks the worker has not taken are taken here,
      // beside it, and the groups it steps from now take none. Closed under the lock, which
      // the worker holds through a group's sums: none is under way once it is ours.
      {
        std::lock_guard lock(sums_mutex_);
        sums_closed_ = true;
      }
      partials_->finish(groups_.owned_grad_on_host(), modes_.accum);
    }
    return true;
  }
  speculator_->finish();
  // The sums and flags of the blocks the worker did not take.
  if (take_sums_) partials_->finish(groups_.owned_grad_on_host(), modes_.accum);
  if (early_placement_) placement_stream_->synchronize();
  return true;
}

void Speculation::await_param(std::size_t param, Stream& stream) {
  if (!tail_ || param >= param_groups_.size()) return;
  for (std::size_t g : param_groups_[param]) {
    speculator_->await(g);
    placed_[g]->block(stream);
  }
}

void Speculation::drop_tail() {
  if (!tail_) return;
  tail_ = false;  // a failure below fails the engine; nothing waits for the tail again
  speculator_->abandon();
  placement_stream_->synchronize();
}

void Speculation::drain() {
  if (!tail_) return;
  tail_ = false;  // a failure below fails the engine; nothing waits for the tail again
  speculator_->drain();
  placement_stream_->synchronize();
}

const GradPartials* Speculation::partials() const noexcept {
  return take_sums_ ? partials_.get() : nullptr;
}

bool Speculation::lr_fixed_while_armed() const {
  return !modes_.speculation_rollback && speculator_->armed();
}

void Speculation::skip(bool speculated) {
  drop_tail();  // a tail left before the verdict: its steps go with the rest
  if (speculated) roll_back();
  if (speculated && early_placement_) place_restored();
  speculator_->record(speculated, /*rollback=*/true);
}

bool Speculation::verdict(bool speculated, bool clipped, double lr) {
  // The speculated steps stand when clipping left the scale as speculated (1 / loss scale) and
  // the schedule the learning rate.
  const bool stands = speculated && !clipped && lr == hyper_.lr;
  if (speculated && !stands) {
    drop_tail();  // a tail left before the verdict: its steps go with the rest
    roll_back();
  }
  // The resident groups stepped into the other copy have their values there now (a group the
  // worker still runs goes on writing it: whatever reads it waits for the tail). The groups it
  // takes from here on step in place, the verdict known: their current copy stays theirs.
  if (stands && modes_.speculation_rollback) {
    std::lock_guard lock(mode_mutex_);
    in_place_ = true;
    for (std::size_t g = 0; g < into_other_.size(); ++g) {
      if (into_other_[g] != 0) state_.flip(g);
    }
  }
  if (OptimizerSwap* swap = state_.swap(); stands && swap != nullptr) {
    swap->end_speculation(/*keep=*/true);  // the swapped groups' other regions made current
  }
  speculator_->record(speculated, clipped);
  return stands;
}

char* Speculation::own_out(std::size_t group) const {
  // Speculating with placement after the verdict: each group its own place, since the verdict
  // comes after every step. Placed early, the boundary's own steps (a rollback's) take the
  // first buffer, as without speculation.
  if (early_placement_) return nullptr;
  return static_cast<char*>(state_.param_staging()) +
         staging_offsets_[group] * dtype_size(modes_.compute);
}

void Speculation::roll_back() {
  if (!modes_.speculation_rollback && ctx_.layout.resident_groups != 0) {
    throw make_error(ErrorCategory::internal,
                     "super_offload: a rollback of steps that keep no second copy of the state "
                     "(no clipping and no overflow check configured); the state cannot be "
                     "restored");
  }
  // The resident groups' current copy was only read: the other copy's writes are dropped by
  // leaving it the other.
  if (OptimizerSwap* swap = state_.swap(); swap != nullptr) swap->end_speculation(false);
}

std::vector<optim::Slice> Speculation::between_copies(std::size_t group, int from, int to,
                                                      char* out) {
  // Each piece written at its place in copy `to`, read from the same place in copy `from`.
  std::vector<optim::Slice> group_pieces =
      groups_.pieces(group, copy_slices(to), GroupState{}, out);
  if (from == to) return group_pieces;
  const std::size_t state_size = dtype_size(ctx_.config.optimizer_state_dtype);
  const auto* to_master = static_cast<const float*>(copy_base_[to][0]);
  for (optim::Slice& piece : group_pieces) {
    const auto at = static_cast<std::size_t>(piece.master - to_master);
    piece.master_from = static_cast<const float*>(copy_base_[from][0]) + at;
    for (int k = 0; k < ctx_.config.optimizer.state_buffers(); ++k) {
      piece.state_from[k] =
          static_cast<const char*>(copy_base_[from][1 + static_cast<std::size_t>(k)]) +
          at * state_size;
    }
  }
  return group_pieces;
}

void Speculation::speculate_group(std::size_t group) {
  const bool swapped = group >= ctx_.layout.resident_groups;
  // Where a verdict can undo the step and has not been given when the worker takes the group,
  // the optimizer reads the group's current copy of the state and writes the other (verdict()
  // makes it the group's where the step stands); after a verdict that keeps the steps (a
  // tail), in place.
  const int current = swapped ? 0 : current_[group];
  int written = current;  // the copy of the state the group's values are in after its step
  if (!swapped && modes_.speculation_rollback) {
    std::lock_guard lock(mode_mutex_);
    if (!in_place_) {
      written = 1 - current;
      into_other_[group] = 1;
    }
  }
  if (before_step_) before_step_(group);
  Timer timer;
  // Placed early, the staging's buffers in turn, each once the copies out of it are done;
  // otherwise the group's own place there.
  const std::size_t buffer = staging_free_.empty() ? 0 : speculated_++ % staging_free_.size();
  char* out = groups_.out_of(group);
  if (early_placement_) {
    TraceSpan span(ctx_.device.trace(), "speculation", "wait staging");
    staging_free_[buffer]->synchronize();
    out = static_cast<char*>(state_.param_staging()) +
          buffer * largest_step_group(ctx_.layout) * dtype_size(modes_.compute);
  }
  if (swapped) {
    speculate_swapped(group, out);
  } else {
    {
      TraceSpan span(ctx_.device.trace(), "speculation",
                     written == current ? "optimizer" : "optimizer, other copy");
      optimizer_.step(between_copies(group, current, written, out), hyper_, *stream_);
      stream_->synchronize();
    }
    // The group's part of the norm and the non-finite check, while backward goes on.
    if (take_sums_) {
      std::lock_guard lock(sums_mutex_);
      if (!sums_closed_) {
        TraceSpan span(ctx_.device.trace(), "speculation", "sums");
        partials_->group_final(group, groups_.owned_grad_on_host(), modes_.accum);
      }
    }
  }
  // Stage 3: its updated values into the compute shard now, on a stream of their own (the
  // group's backward is over: its gradient is final); a rollback places them again.
  if (early_placement_) {
    GroupState where;
    where.staged = swapped;
    // Its values where the step wrote them (fp32: the masters are the values).
    groups_.place(group, copy_slices(written), where, out, *placement_stream_);
    staging_free_[buffer]->record(*placement_stream_);
    placed_[group]->record(*placement_stream_);
  }
  std::lock_guard lock(seconds_mutex_);
  seconds_.add(timer.seconds());
}

void Speculation::speculate_swapped(std::size_t group, char* out) {
  // Its state as it stands from the current region, its gradient held (the GradSwap takes its
  // statistics there), the step written to the other region: a rollback drops that write.
  const std::size_t swapped = group - ctx_.layout.resident_groups;
  OptimizerSwap& swap = *state_.swap();
  GradSwap* grad_swap = state_.grad_swap();
  GroupState where;
  where.swapped = true;
  where.view = swap.acquire_speculated(swapped);
  if (grad_swap != nullptr) where.grad = grad_swap->hold(swapped);
  optimizer_.step(groups_.pieces(group, slices_, where, out), hyper_, *stream_);
  stream_->synchronize();
  if (!modes_.mixed) stage_masters(group, where, out);
  if (grad_swap != nullptr) grad_swap->unhold(swapped);
  swap.release_speculated(swapped);
}

void Speculation::stage_masters(std::size_t group, const GroupState& where, char* out) {
  const Layout& layout = ctx_.layout;
  const Bucket& bucket = layout.step_groups[group];
  const int r = modes_.shard_ranks == 1 ? 0 : rank_;
  const std::size_t block_start = static_cast<std::size_t>(r) * bucket.block;
  for (const BucketPiece& piece : bucket.pieces) {
    const std::size_t count = piece_valid(piece, slices_[piece.param].count);
    if (count == 0) continue;
    const std::size_t at = layout.params[layout.trainable[piece.param]].flat + piece.begin;
    std::memcpy(out + (bucket_position(bucket, piece, r) - block_start) * sizeof(float),
                where.view.master + (at - layout.group_lo[group]), count * sizeof(float));
  }
}

void Speculation::place_restored() {
  state_.unify();  // the groups' current masters, each where the last steps left them
  const std::vector<optim::Slice> all = groups_.slices();
  Stream& stream = ctx_.device.default_stream();
  Stream& state_stream = state_.state_device().default_stream();
  const Layout& layout = ctx_.layout;
  for (std::size_t g = 0; g < layout.step_groups.size(); ++g) {
    char* out = groups_.out_of(g);
    // A swapped group's masters are read back from its current region (the step's, dropped).
    GroupState where;
    where.swapped = g >= layout.resident_groups;
    if (where.swapped) where.view = state_.swap()->peek(g - layout.resident_groups);
    // The compute values are the masters rounded (mixed precision) or the masters themselves.
    if (modes_.mixed) {
      staging_read_.synchronize();
      optimizer_.write_param_out(groups_.pieces(g, all, where, out), state_stream);
      state_stream.synchronize();
    }
    groups_.place(g, all, where, out, stream);
    staging_read_.record(stream);
    if (where.swapped) stream.synchronize();  // the next peek takes the buffer
  }
  // The skip returns without the step's own wait, and the next boundary's speculated steps
  // write this staging again.
  stream.synchronize();
}

}  // namespace zero::engine
