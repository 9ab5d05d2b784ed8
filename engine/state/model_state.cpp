// ModelState: where the model state lives, its allocation, and values in and out of it (see
// model_state.h). What each stage holds per rank is docs/design.md's table; README "Memory"
// lists the buffers beside it. The NVMe half (the swaps, the I/O, shards as the fetcher reads
// them) is swap_state.cpp.
#include "engine/state/model_state.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/log.h"

namespace zero::engine {

ModelState::ModelState(const EngineContext& context, const MemoryPlan& plan,
                       const FaultHooks& faults)
    : ctx_(context),
      plan_(plan),
      faults_(faults),
      modes_(context.layout.modes),
      rank_(context.shards().rank()),
      full_(context.registry.param_count(), nullptr) {
  if ((modes_.optimizer_offload || modes_.param_offload) && ctx_.device.offload_beside()) {
    // The owned state is in pinned memory, where a CPU device of its own computes on it
    // (beside a GPU, or the asynchronous CPU device that stands in for one).
    host_ = create_cpu_device(CpuDeviceMode::sync);
    host_scalars_ = static_cast<float*>(host_->reserve(Tier::host, kScratchBytes));
  }
}

ModelState::~ModelState() {
  param_swap_.reset();  // its writes in flight use the file and the host arena
  if (host_scalars_ != nullptr) host_->unreserve(Tier::host, host_scalars_, kScratchBytes);
}

std::size_t ModelState::owned_valid(std::size_t param) const {
  return ctx_.layout.params[param].shape.valid(modes_.stage == 0 ? 0 : rank_);
}

Device& ModelState::state_device() {
  return modes_.optimizer_offload ? host_device() : ctx_.device;
}

Device& ModelState::host_device() {
  return host_ ? *host_ : ctx_.device;
}

float* ModelState::state_scalars(float* device_scratch) {
  return modes_.optimizer_offload && host_ ? host_scalars_ : device_scratch;
}

bool ModelState::master_is_param() const noexcept {
  return !modes_.mixed && modes_.stage == 0;
}

float* ModelState::master_of(std::size_t param) {
  if (master_is_param()) return static_cast<float*>(full_[param]);
  return master_ + ctx_.layout.params[param].flat;
}

void ModelState::swap_copies() noexcept {
  if (other_[0] != nullptr) {
    float* const other = static_cast<float*>(other_[0]);
    other_[0] = master_;
    master_ = other;
  }
  for (int k = 0; k < 2; ++k) {
    if (other_[1 + k] != nullptr) std::swap(moments_[k], other_[1 + k]);
  }
  for (std::uint8_t& f : flipped_) f ^= 1;
  flipped_count_ = flipped_.size() - flipped_count_;
}

void ModelState::flip(std::size_t group) {
  const std::size_t groups = ctx_.layout.resident_groups;
  ZERO_CHECK(group < groups, "flip: group {} is not resident ({} are)", group, groups);
  if (flipped_.empty()) flipped_.assign(groups, 0);
  flipped_[group] ^= 1;
  flipped_count_ = flipped_[group] != 0 ? flipped_count_ + 1 : flipped_count_ - 1;
  if (flipped_count_ == groups) swap_copies();
}

void ModelState::unify() {
  if (flipped_count_ == 0) return;
  if (2 * flipped_count_ > flipped_.size()) swap_copies();
  const Layout& layout = ctx_.layout;
  const std::size_t state_size = dtype_size(ctx_.config.optimizer_state_dtype);
  Device& d = state_device();
  for (std::size_t g = 0; g < flipped_.size(); ++g) {
    if (flipped_[g] == 0) continue;
    const std::size_t begin = layout.group_lo[g];
    const std::size_t n = std::min(layout.step_groups[g].block, layout.resident_end - begin);
    if (master_ != nullptr && other_[0] != nullptr) {
      d.copy(master_ + begin, static_cast<const float*>(other_[0]) + begin, n * sizeof(float));
    }
    for (int k = 0; k < 2; ++k) {
      if (moments_[k] == nullptr || other_[1 + k] == nullptr) continue;
      d.copy(static_cast<char*>(moments_[k]) + begin * state_size,
             static_cast<const char*>(other_[1 + k]) + begin * state_size, n * state_size);
    }
    flipped_[g] = 0;
  }
  flipped_count_ = 0;
}

void* ModelState::shard_source(std::size_t param) {
  const ParamPlacement& place = ctx_.layout.params[param];
  if (swapped_param(param)) return nullptr;  // on NVMe: copy_shard reads it
  if (place.compute_flat != kNone) {
    return static_cast<char*>(compute_shard_) + place.compute_flat * dtype_size(modes_.compute);
  }
  // fp32 trainable: the master is the compute shard (speculation places its steps' values in
  // compute shards of their own, so no group is flipped here).
  ZERO_CHECK(unified(), "shard_source: parameter {}'s master is split between the state's copies",
             param);
  return master_ + place.flat;
}

std::array<const Arena*, 5> ModelState::arenas() const {
  return {state_arena_.get(), offload_arena_.get(), param_arena_.get(), nvme_arena_.get(),
          param_swap_ ? &param_swap_->arena() : nullptr};
}

ModelState::PartsMemory ModelState::allocate(const std::string& job_id) {
  // Refused before any memory is taken.
  if (modes_.optimizer_nvme) check_swap_buffers();
  // The arenas the plan sizes, then its blocks, in its order: the plan's sums are what is
  // taken here, by construction. What a run holds (offload, swaps, super_offload's second copy) is
  // the plan's list of blocks, decided at its making.
  make_arenas();
  PartsMemory parts;
  parts.full_grads.assign(ctx_.registry.param_count(), nullptr);
  void* reduce_staging = nullptr;
  for (const PlannedBlock& block : plan_.blocks) {
    take_block(block, job_id, parts, reduce_staging);
  }
  state_device().default_stream().synchronize();
  const MemoryPlan& plan = plan_;
  Device& device = ctx_.device;
  if (plan.grad.made()) {
    parts.grad_arena =
        std::make_unique<Arena>(&device, Tier::device, plan.grad.capacity, plan.grad.name);
  }
  parts.reduce_target = reduce_target(reduce_staging);
  if (plan.gather.made()) {
    parts.gather_arena =
        std::make_unique<Arena>(&device, Tier::device, plan.gather.capacity, plan.gather.name);
  }
  device.default_stream().synchronize();
  return parts;
}

void ModelState::make_arenas() {
  const MemoryPlan& plan = plan_;
  Device& device = ctx_.device;
  if (plan.offload.made()) {
    offload_arena_ = std::make_unique<Arena>(&device, plan.offload.tier, plan.offload.capacity,
                                             plan.offload.name);
  }
  state_arena_ =
      std::make_unique<Arena>(&device, Tier::device, plan.state.capacity, plan.state.name);
  if (plan.param.made()) {
    param_arena_ =
        std::make_unique<Arena>(&device, plan.param.tier, plan.param.capacity, plan.param.name);
  }
}

void* ModelState::take(const PlannedBlock& block) {
  if (block.bytes == 0) return nullptr;
  Arena& arena = block.arena == ArenaRole::state     ? *state_arena_
                 : block.arena == ArenaRole::offload ? *offload_arena_
                                                     : *param_arena_;
  const Block taken = arena.allocate(block.kind, block.bytes);
  blocks_.push_back(taken);
  return taken.ptr;
}

void* ModelState::take_zeroed(const PlannedBlock& block, DType dtype, std::size_t count) {
  void* taken = take(block);
  if (taken != nullptr) {
    state_device().fill(taken, dtype, count, 0.0f, state_device().default_stream());
  }
  return taken;
}

void ModelState::take_block(const PlannedBlock& block, const std::string& job_id,
                            PartsMemory& parts, void*& reduce_staging) {
  const Layout& layout = ctx_.layout;
  switch (block.role) {
    case BlockRole::full_param:
      full_[block.index] = take(block);
      break;
    case BlockRole::full_grad:  // the GradReducer's for the run
      parts.full_grads[block.index] = take(block);
      break;
    case BlockRole::master:
      master_ = static_cast<float*>(take_zeroed(block, DType::f32, layout.resident_end));
      break;
    case BlockRole::grad_flat:
      grad_flat_ = take_zeroed(block, modes_.accum,
                               modes_.grad_nvme ? layout.resident_end : layout.owned.total);
      break;
    case BlockRole::moment:
      moments_[block.index] =
          take_zeroed(block, ctx_.config.optimizer_state_dtype, layout.resident_end);
      break;
    case BlockRole::reduce_staging:
      reduce_staging = take(block);
      break;
    case BlockRole::param_staging:
      param_staging_ = take(block);
      break;
    case BlockRole::reduce_device:
      reduce_device_ = take(block);
      break;
    case BlockRole::device_grad:  // written onto zeros by each window's first micro-step
      device_grad_ = take(block);
      break;
    case BlockRole::speculation_state:  // zeros where the steps never write, as the current's
      other_[block.index] = block.index == 0 ? take_zeroed(block, DType::f32, layout.resident_end)
                                             : take_zeroed(block, ctx_.config.optimizer_state_dtype,
                                                           layout.resident_end);
      break;
    case BlockRole::optimizer_swap:  // takes its buffers from the offload arena
      state_device().default_stream().synchronize();
      open_swap_io(job_id);
      set_up_swap();
      break;
    case BlockRole::grad_swap:  // takes its buffers from the offload arena
      set_up_grad_swap();
      break;
    case BlockRole::compute_shard:
      take_compute_shard(block);
      break;
    case BlockRole::param_swap:  // takes its buffers from the param arena
      open_swap_io(job_id);
      param_swap_ = std::make_unique<ParamSwap>(ctx_, plan_, *aio_, *swap_dir_, *param_arena_);
      break;
    case BlockRole::bucket:
      parts.bucket_buffers.push_back(take(block));
      break;
    case BlockRole::gather_buffer:
      gather_buffer_ = take(block);
      break;
  }
}

void ModelState::take_compute_shard(const PlannedBlock& block) {
  compute_shard_ = take(block);
  if (compute_shard_ == nullptr) return;
  const Layout& layout = ctx_.layout;
  if (block.arena == ArenaRole::param) {  // host memory: zeroed by the host
    host_device().fill(compute_shard_, modes_.compute, layout.compute_resident_end, 0.0f,
                       host_device().default_stream());
    host_device().default_stream().synchronize();
  } else {
    ctx_.device.fill(compute_shard_, modes_.compute, layout.compute_shards.total, 0.0f,
                     ctx_.device.default_stream());
  }
}

GradTarget ModelState::reduce_target(void* reduce_staging) {
  // Reduced blocks go into the owned gradient shard; with optimizer offload it is in pinned
  // memory, where the CPU adds them in after they come down.
  GradTarget target;
  target.grad_flat = grad_flat_;
  target.accum = modes_.accum;
  target.adder = modes_.optimizer_offload ? &state_device() : &ctx_.device;
  target.staging = modes_.optimizer_offload ? reduce_staging : nullptr;
  // Beside a GPU a ring of slots (the plan's), else one.
  target.staging_slots = reduce_staging_slots(ctx_.layout, ctx_.device.offload_beside());
  target.slot_bytes = plan_.reduce_staging_bytes / target.staging_slots;
  target.swap = grad_swap_.get();
  target.resident_end = ctx_.layout.resident_end;
  if (reduce_device_ != nullptr) {  // direct_reduce (memory_plan.h)
    target.device_block = reduce_device_;
    target.block_sums = reinterpret_cast<float*>(static_cast<char*>(reduce_device_) +
                                                 reduce_device_sums_offset(ctx_.layout));
  }
  target.device_flat = device_grad_;  // device_accumulation (memory_plan.h), or null
  return target;
}

void ModelState::put_state(std::size_t flat, const float* values, const void* const* moments_in,
                           std::size_t count) {
  unify();  // the values go to copy 0, the current copy of every group
  const Layout& layout = ctx_.layout;
  const int moment_count = ctx_.config.optimizer.state_buffers();
  const char* moment_in[2] = {static_cast<const char*>(moments_in[0]),
                              static_cast<const char*>(moments_in[1])};
  const DType state_dtype = ctx_.config.optimizer_state_dtype;
  const std::size_t state_size = dtype_size(state_dtype);
  while (count > 0) {
    if (flat < layout.resident_end) {
      // In memory: with offload host memory the host writes; else device memory, through the
      // device's copies (fp32 at stage 0 keeps no master: the compute copy is the value).
      const std::size_t n = std::min(count, layout.resident_end - flat);
      Device& d = modes_.optimizer_offload ? host_device() : ctx_.device;
      if (master_ != nullptr) d.copy(master_ + flat, values, n * sizeof(float));
      for (int m = 0; m < moment_count; ++m) {
        char* to = static_cast<char*>(moments_[m]) + flat * state_size;
        if (moment_in[m] != nullptr) {
          d.copy(to, moment_in[m], n * state_size);
        } else {
          d.fill(to, state_dtype, n, 0.0f, d.default_stream());
          d.default_stream().synchronize();
        }
      }
      flat += n, values += n, count -= n;
      for (const char*& in : moment_in) {
        if (in != nullptr) in += n * state_size;
      }
      continue;
    }
    // The swapped groups are filled in order (zeroed: moments without values stay zero); one
    // skipped (no values) is written as zeros.
    const std::size_t g = group_at(flat);
    const std::size_t s = g - layout.resident_groups;
    if (filling_ != s) {
      const std::size_t from = filling_ == kNone ? 0 : filling_ + 1;
      if (filling_ != kNone) swap_->commit(filling_);
      for (std::size_t k = from; k < s; ++k) {
        swap_->fill(k);
        swap_->commit(k);
      }
      swap_->fill(s);
      filling_ = s;
    }
    const GroupView view = swap_->filled(s);
    const std::size_t group_end = layout.group_lo[g] + layout.step_groups[g].block;
    const std::size_t n = std::min(count, group_end - flat);
    const std::size_t at = flat - layout.group_lo[g];
    std::memcpy(view.master + at, values, n * sizeof(float));
    for (int m = 0; m < moment_count; ++m) {
      if (moment_in[m] == nullptr) continue;
      std::memcpy(static_cast<char*>(view.state[m]) + at * state_size, moment_in[m],
                  n * state_size);
      moment_in[m] += n * state_size;
    }
    flat += n, values += n, count -= n;
  }
}

void ModelState::finish_state() {
  if (!swap_) return;
  const std::size_t from = filling_ == kNone ? 0 : filling_ + 1;
  if (filling_ != kNone) swap_->commit(filling_);
  for (std::size_t k = from; k < swap_->groups(); ++k) {
    swap_->fill(k);
    swap_->commit(k);
  }
  swap_->finish();
  filling_ = kNone;
}

void ModelState::keep_swap_files(const std::string& why) {
  if (swap_dir_) swap_dir_->keep(why);
}

}  // namespace zero::engine
