// The layout and sizes of the engine's state (memory_plan.h). The arithmetic here is what
// Engine::Impl::lay_out and allocate use; README "Memory" and docs/design.md describe it.
#include "engine/plan/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "base/block_quant.h"
#include "base/direct_io.h"
#include "base/error.h"
#include "device/arena.h"

namespace zero::engine {
namespace {

constexpr std::size_t kAlign = Arena::kDefaultAlignment;

// Packed chunks (base/block_quant.h) start at a multiple of this beside the data they carry.
constexpr std::size_t kPackedAlign = 16;

std::size_t align_packed(std::size_t bytes) {
  return (bytes + kPackedAlign - 1) / kPackedAlign * kPackedAlign;
}

std::size_t align_up(std::size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

std::size_t& at(KindBytes& bytes, MemoryKind kind) {
  return bytes[static_cast<std::size_t>(kind)];
}

// A block every arena holds from init on: counted as held and in the peak.
void hold(ArenaPlan& arena, MemoryKind kind, std::size_t bytes) {
  at(arena.held, kind) += bytes;
  at(arena.peak, kind) += bytes;
}

// The buckets gradients are reduced in: ordered by the module after which each gradient is
// complete. Backward visits modules in reverse registration order, so that is the earliest
// registered module using the parameter; latest first.
void plan_reduction(const Registry& registry, const config::Config& config, Layout& layout) {
  const auto& specs = registry.params();
  std::vector<std::size_t> numels(layout.trainable.size());
  for (std::size_t t = 0; t < layout.trainable.size(); ++t) {
    numels[t] = specs[layout.trainable[t]].numel;
  }
  auto ready_module = [&](std::size_t t) {
    const auto& modules = specs[layout.trainable[t]].modules;
    return *std::min_element(modules.begin(), modules.end());
  };
  std::vector<std::size_t> order(layout.trainable.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return ready_module(a) > ready_module(b); });
  layout.buckets = plan_buckets(order, numels, layout.modes.shard_ranks,
                                static_cast<std::size_t>(config.zero.reduce_bucket_size));
  layout.param_buckets.assign(layout.trainable.size(), {});
  for (std::size_t b = 0; b < layout.buckets.size(); ++b) {
    for (const BucketPiece& piece : layout.buckets[b].pieces) {
      auto& list = layout.param_buckets[piece.param];
      if (list.empty() || list.back() != b) list.push_back(b);
    }
  }
}

// Stages 2-3: full gradients live from a module's pre_backward until the bucket holding their
// last piece is issued, and buckets issue in order once all their parameters are ready. Walks
// the planned backward (modules in reverse registration order) as the hooks run it and returns
// the most bytes live at once, each block as asked (`exact`) and rounded to the arena's
// alignment (`aligned`).
struct GradPeak {
  std::size_t exact = 0;
  std::size_t aligned = 0;
};

GradPeak walk_backward(const Registry& registry, const Layout& layout, std::size_t csize) {
  const auto& specs = registry.params();
  const auto& buckets = layout.buckets;
  std::vector<std::size_t> uses(specs.size(), 0), waiting(buckets.size(), 0);
  std::vector<bool> live(specs.size(), false);
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    for (std::size_t i = 0; i < buckets[b].pieces.size(); ++i) {
      if (i == 0 || buckets[b].pieces[i].param != buckets[b].pieces[i - 1].param) ++waiting[b];
    }
  }
  GradPeak now, peak;
  std::size_t next = 0;
  for (std::size_t m = registry.module_count(); m-- > 0;) {
    for (std::size_t p : registry.module(m).params) {
      if (!specs[p].trainable || live[p] || uses[p] > 0) continue;
      live[p] = true;
      now.exact += specs[p].numel * csize;
      now.aligned += align_up(specs[p].numel * csize);
    }
    peak.exact = std::max(peak.exact, now.exact);
    peak.aligned = std::max(peak.aligned, now.aligned);
    for (std::size_t p : registry.module(m).params) {
      if (!specs[p].trainable || ++uses[p] != specs[p].modules.size()) continue;
      for (std::size_t b : layout.param_buckets[layout.trainable_pos[p]]) waiting[b] -= 1;
    }
    for (; next < buckets.size() && waiting[next] == 0; ++next) {
      for (const BucketPiece& piece : buckets[next].pieces) {
        const std::size_t p = layout.trainable[piece.param];
        if (live[p] && layout.param_buckets[piece.param].back() == next) {
          live[p] = false;
          now.exact -= specs[p].numel * csize;
          now.aligned -= align_up(specs[p].numel * csize);
        }
      }
    }
  }
  return peak;
}

// The buffers' sizes: reduction buckets, the stage 1-2 all-gather bucket, the offload staging,
// and with offload beside a GPU the host's scalar scratch.
void plan_buffers(const config::Config& config, const Layout& layout, bool beside,
                  MemoryPlan& plan) {
  const StateModes& m = layout.modes;
  const std::size_t csize = dtype_size(m.compute);
  std::size_t largest_bucket = 0;
  for (const Bucket& b : layout.buckets) largest_bucket = std::max(largest_bucket, b.block);
  const std::size_t largest_group = largest_step_group(layout);
  const std::size_t largest_gather = (m.stage == 1 || m.stage == 2) ? largest_group : 0;
  plan.bucket_count = layout.buckets.empty() || identity_reduction(config, layout) ? 0
                      : config.zero.overlap_comm                                   ? 2
                                                                                   : 1;
  plan.bucket_bytes = bucket_buffer_bytes(m, largest_bucket);
  plan.gather_bytes = largest_gather * static_cast<std::size_t>(m.shard_ranks) * csize;
  plan.reduce_staging_bytes = m.optimizer_offload ? reduce_staging_slots(layout, beside) *
                                                        largest_bucket * dtype_size(m.wire)
                                                  : 0;
  plan.param_staging_bytes = m.optimizer_offload || m.param_nvme
                                 ? param_staging_buffers(layout, beside) * largest_group * csize
                                 : 0;
  if (m.speculate) plan.param_staging_bytes = speculation_staging_elements(layout) * csize;
  if (direct_reduce(layout, beside)) {
    plan.reduce_device_bytes =
        reduce_device_sums_offset(layout) + (layout.buckets.size() + 1) * sizeof(float);
  }
  if (device_accumulation(config, layout, beside)) {
    plan.device_grad_bytes = layout.owned.total * dtype_size(m.accum);
  }
  if (beside && (m.optimizer_offload || m.param_offload)) plan.host_scratch_bytes = kScratchBytes;
  if (m.verdict_on_device()) plan.pinned_scratch_bytes = kScratchBytes;
}

// Optimizer NVMe: buffer_count buffers of the largest swapped group's region (masters and
// moments, each placed at 4096), and the swap file's arena; with gradient NVMe the groups'
// gradient regions in the same file and buffer_count buffers of the largest. Returns the
// largest region.
std::size_t plan_optimizer_swap(const config::Config& config, const Layout& layout,
                                MemoryPlan& plan) {
  if (!layout.modes.optimizer_nvme) return 0;
  const int state_buffers = config.optimizer.state_buffers();
  const std::size_t state_size = dtype_size(config.optimizer_state_dtype);
  const std::size_t grad_size = dtype_size(layout.modes.accum);
  const bool grads = layout.modes.grad_nvme;
  const auto region = [&](std::size_t elements) {
    return align_direct(elements * 4) +
           static_cast<std::size_t>(state_buffers) * align_direct(elements * state_size);
  };
  std::size_t largest_region = 0, largest_grad = 0, file = 0;
  plan.nvme.name = "optimizer swap file";
  plan.nvme.tier = Tier::nvme;
  for (std::size_t g = layout.resident_groups; g < layout.step_groups.size(); ++g) {
    const std::size_t elements = layout.step_groups[g].block;
    largest_region = std::max(largest_region, region(elements));
    if (grads) largest_grad = std::max(largest_grad, align_direct(elements * grad_size));
    if (elements == 0) continue;
    // super_offload: a second region, which the speculated step writes (OptimizerSwap).
    const std::size_t regions = layout.modes.speculate ? 2 : 1;
    file += regions * region(elements);
    hold(plan.nvme, MemoryKind::master, regions * elements * 4);
    hold(plan.nvme, MemoryKind::moment, regions * state_buffers * elements * state_size);
    if (grads) {
      file += align_direct(elements * grad_size);
      hold(plan.nvme, MemoryKind::grad, elements * grad_size);
    }
  }
  plan.nvme.capacity = std::max<std::size_t>(file, 1);
  plan.swap_slot_bytes = largest_region;
  plan.swap_slots = static_cast<std::size_t>(config.zero.offload_optimizer.buffer_count);
  if (grads && largest_grad != 0) {
    plan.grad_slot_bytes = largest_grad;
    // super_offload: one more, which the speculated step holds while backward's adds go on.
    plan.grad_slots = plan.swap_slots + (layout.modes.speculate ? 1 : 0);
  }
  return largest_region;
}

// Parameter NVMe: three bounce buffers and buffer_count read buffers of the largest shard's
// region, and the swapped shards' file. Returns one buffer's bytes with its alignment.
std::size_t plan_param_swap(const Registry& registry, const config::Config& config,
                            const Layout& layout, MemoryPlan& plan) {
  const StateModes& m = layout.modes;
  if (m.stage != 3 || !m.param_nvme) return 0;
  const std::size_t csize = dtype_size(m.compute);
  const auto& specs = registry.params();
  std::size_t largest = 0, file = 0;
  for (std::size_t p = 0; p < specs.size(); ++p) {
    const ParamPlacement& place = layout.params[p];
    if (place.compute_flat == kNone) continue;
    const std::size_t shard = shard_shape(specs[p].numel, layout.modes.shard_ranks).shard;
    const std::size_t region = align_direct(shard * csize);
    largest = std::max(largest, region);
    if (place.compute_flat >= layout.compute_resident_end) {
      file += region;
      hold(plan.param_nvme, MemoryKind::param, shard * csize);
    }
  }
  plan.param_nvme.name = "parameter swap file";
  plan.param_nvme.tier = Tier::nvme;
  plan.param_nvme.capacity = std::max<std::size_t>(file, 1);
  plan.param_bounce_bytes = std::max<std::size_t>(largest, 1);
  plan.param_bounces = 3 + static_cast<std::size_t>(config.zero.offload_param.buffer_count);
  return largest + kDirectIoAlignment;
}

// The blocks, in the order the ModelState takes them: the replicated compute parameters
// (stages 0-2) and gradients (0-1); the owned state (masters, gradient shard, moments; with
// NVMe only their resident part), in the state arena or with optimizer offload in its own, with
// the staging and the swap's buffers there; stage-3 compute shards, in the state arena or with
// offload_param in theirs, with its staging and the parameter swap's buffers; the bucket
// buffers and the stage 1-2 all-gather bucket.
void plan_blocks(const Registry& registry, const config::Config& config, const Layout& layout,
                 std::size_t swap_region, std::size_t bounce, MemoryPlan& plan) {
  const StateModes& m = layout.modes;
  const std::size_t csize = dtype_size(m.compute);
  const auto& specs = registry.params();
  const std::size_t state_size = dtype_size(config.optimizer_state_dtype);
  const ArenaRole owned = m.optimizer_offload ? ArenaRole::offload : ArenaRole::state;
  auto take = [&](BlockRole role, ArenaRole arena, MemoryKind kind, std::size_t bytes,
                  std::size_t index = 0) {
    plan.blocks.push_back({role, arena, kind, bytes, align_up(bytes), index});
  };
  for (std::size_t p = 0; p < specs.size() && m.stage <= 2; ++p) {
    take(BlockRole::full_param, ArenaRole::state, MemoryKind::param, specs[p].numel * csize, p);
  }
  // The replicated gradients one after another, so that they are one region of the arena
  // (GradReducer::replicated_region): one fill, one norm and one check a step.
  for (std::size_t p = 0; p < specs.size() && m.stage <= 1; ++p) {
    if (specs[p].trainable) {
      take(BlockRole::full_grad, ArenaRole::state, MemoryKind::grad, specs[p].numel * csize, p);
    }
  }
  if (m.mixed || m.stage >= 1) {
    take(BlockRole::master, owned, MemoryKind::master, layout.resident_end * 4);
  }
  if (m.grad_shard()) {
    // With gradient NVMe only the resident groups' part.
    const std::size_t elements = m.grad_nvme ? layout.resident_end : layout.owned.total;
    take(BlockRole::grad_flat, owned, MemoryKind::grad, elements * dtype_size(m.accum));
  }
  for (int k = 0; k < config.optimizer.state_buffers(); ++k) {
    take(BlockRole::moment, owned, MemoryKind::moment, layout.resident_end * state_size,
         static_cast<std::size_t>(k));
  }
  if (m.optimizer_offload) {
    take(BlockRole::reduce_staging, owned, MemoryKind::buffer, plan.reduce_staging_bytes);
    take(BlockRole::param_staging, owned, MemoryKind::buffer, plan.param_staging_bytes);
  }
  if (m.speculation_rollback) {
    // The second copy of the resident state, which the speculated steps write while the
    // current one stays as it was for a rollback (a swapped group's is its other region on
    // NVMe).
    if (m.mixed || m.stage >= 1) {
      take(BlockRole::speculation_state, owned, MemoryKind::master, layout.resident_end * 4, 0);
    }
    for (int k = 0; k < config.optimizer.state_buffers(); ++k) {
      take(BlockRole::speculation_state, owned, MemoryKind::moment,
           layout.resident_end * state_size, 1 + static_cast<std::size_t>(k));
    }
  }
  if (m.optimizer_nvme) {
    plan.blocks.push_back({BlockRole::optimizer_swap, owned, MemoryKind::buffer,
                           swap_region != 0 ? plan.swap_slots * swap_region : 0,
                           plan.swap_slots * (swap_region + kDirectIoAlignment), 0});
  }
  if (m.grad_nvme) {
    plan.blocks.push_back({BlockRole::grad_swap, owned, MemoryKind::buffer,
                           plan.grad_slots * plan.grad_slot_bytes,
                           plan.grad_slots * (plan.grad_slot_bytes + kDirectIoAlignment), 0});
  }
  if (m.stage == 3 && m.param_offload) {
    take(BlockRole::compute_shard, ArenaRole::param, MemoryKind::param,
         layout.compute_resident_end * csize);
    if (!m.optimizer_offload) {
      take(BlockRole::param_staging, ArenaRole::param, MemoryKind::buffer,
           plan.param_staging_bytes);
    }
    if (m.param_nvme) {
      plan.blocks.push_back({BlockRole::param_swap, ArenaRole::param, MemoryKind::buffer,
                             plan.param_bounces * plan.param_bounce_bytes,
                             plan.param_bounces * bounce, 0});
    }
  } else if (m.stage == 3) {
    take(BlockRole::compute_shard, ArenaRole::state, MemoryKind::param,
         layout.compute_shards.total * csize);
  }
  for (std::size_t b = 0; b < plan.bucket_count; ++b) {
    take(BlockRole::bucket, ArenaRole::state, MemoryKind::buffer, plan.bucket_bytes, b);
  }
  if (plan.reduce_device_bytes != 0) {
    take(BlockRole::reduce_device, ArenaRole::state, MemoryKind::buffer, plan.reduce_device_bytes);
  }
  if (plan.device_grad_bytes != 0) {
    take(BlockRole::device_grad, ArenaRole::state, MemoryKind::grad, plan.device_grad_bytes);
  }
  take(BlockRole::gather_buffer, ArenaRole::state, MemoryKind::buffer, plan.gather_bytes);
}

// The three arenas the blocks come from: their names and tiers, their capacities and held
// bytes the blocks' sums.
void size_block_arenas(const config::Config& config, const Layout& layout, bool beside,
                       MemoryPlan& plan) {
  const StateModes& m = layout.modes;
  plan.state.name = "model state";
  plan.state.tier = Tier::device;
  if (m.optimizer_offload) {
    // DeepSpeed's pin_memory: page-locked memory copies faster and asynchronously, pageable
    // memory costs nothing beyond itself.
    const bool pinned = pinned_offload(config.zero.offload_optimizer.pin_memory, beside);
    plan.offload.name =
        pinned ? "offloaded optimizer state (pinned)" : "offloaded optimizer state (pageable)";
    plan.offload.tier = pinned ? Tier::pinned : Tier::host;
  }
  if (m.stage == 3 && m.param_offload) {
    const bool pinned = pinned_offload(config.zero.offload_param.pin_memory, beside);
    plan.param.name =
        pinned ? "offloaded compute shards (pinned)" : "offloaded compute shards (pageable)";
    plan.param.tier = pinned ? Tier::pinned : Tier::host;
  }
  for (const PlannedBlock& block : plan.blocks) {
    ArenaPlan& arena = block.arena == ArenaRole::state     ? plan.state
                       : block.arena == ArenaRole::offload ? plan.offload
                                                           : plan.param;
    arena.capacity += block.reserved;
    hold(arena, block.kind, block.bytes);
  }
  plan.state.capacity = std::max<std::size_t>(plan.state.capacity, kAlign);
  if (m.optimizer_offload)
    plan.offload.capacity = std::max<std::size_t>(plan.offload.capacity, kAlign);
  if (m.stage == 3 && m.param_offload) {
    plan.param.capacity = std::max<std::size_t>(plan.param.capacity, kAlign);
  }
}

// Stages 2-3: the gradients while they live, sized by the planned backward's peak, plus a
// quarter for hooks that run in another order.
void plan_grad_arena(const Registry& registry, const Layout& layout, MemoryPlan& plan) {
  if (layout.modes.stage < 2) return;
  const GradPeak walk = walk_backward(registry, layout, dtype_size(layout.modes.compute));
  plan.grad_live_peak = walk.exact;
  plan.grad.name = "gradients (stage 2-3, while live)";
  plan.grad.tier = Tier::device;
  plan.grad.capacity = walk.aligned + walk.aligned / 4 + (std::size_t{1} << 20);
  at(plan.grad.peak, MemoryKind::grad) = walk.exact;
}

// Stage 3: gathered parameters. Persistent ones stay. Of the others, the hooks open at once
// hold their modules' (room for two of the largest modules), and what is kept for reuse or
// fetched ahead is admitted only under stage3_max_live_parameters.
void plan_gather_arena(const Registry& registry, const config::Config& config, const Layout& layout,
                       MemoryPlan& plan) {
  if (layout.modes.stage != 3) return;
  const std::size_t csize = dtype_size(layout.modes.compute);
  const auto& specs = registry.params();
  std::size_t persistent = 0, others = 0, largest_module = 0;
  std::size_t persistent_exact = 0, largest_others_exact = 0;
  for (std::size_t p = 0; p < specs.size(); ++p) {
    const std::size_t padded = gather_block_bytes(layout, p);
    (layout.params[p].persistent ? persistent : others) += align_up(padded);
    if (layout.params[p].persistent) persistent_exact += padded;
  }
  for (const ModuleSpec& module : registry.modules()) {
    std::size_t bytes = 0, others_exact = 0;
    for (std::size_t p : module.params) {
      const std::size_t padded = gather_block_bytes(layout, p);
      bytes += align_up(padded);
      if (!layout.params[p].persistent) others_exact += padded;
    }
    largest_module = std::max(largest_module, bytes);
    largest_others_exact = std::max(largest_others_exact, others_exact);
  }
  const std::size_t live_limit = static_cast<std::size_t>(config.zero.max_live_parameters) * csize;
  plan.gather.name = "gathered parameters (stage 3)";
  plan.gather.tier = Tier::device;
  // hpZ: the secondary partition, one block held for the run.
  const std::size_t secondary = layout.secondary.total * csize;
  plan.gather.capacity = std::max<std::size_t>(
      (secondary != 0 ? align_up(secondary) : 0) + persistent +
          std::min(others, 2 * largest_module + std::min(live_limit, others)) + kAlign,
      kAlign);
  at(plan.gather.held, MemoryKind::param) = secondary;
  // Nothing fetched ahead or kept: every persistent parameter (gathered in forward, before
  // backward needs them) and one module's others.
  plan.gather_live_peak = secondary + persistent_exact + largest_others_exact;
  plan.gather.peak_exact =
      config.zero.prefetch_bucket_size == 0 && config.zero.max_reuse_distance == 0;
  at(plan.gather.peak, MemoryKind::param) =
      plan.gather.peak_exact ? plan.gather_live_peak : plan.gather.capacity;
}

}  // namespace

std::size_t quantized_gather_offset(const Layout& layout, std::size_t param) {
  return align_packed(layout.params[param].gathered() * dtype_size(layout.modes.compute));
}

std::size_t gather_block_bytes(const Layout& layout, std::size_t param) {
  const ParamPlacement& place = layout.params[param];
  const std::size_t copy = place.gathered() * dtype_size(layout.modes.compute);
  if (!layout.modes.quantized_weights || place.shape.shard == 0) return copy;
  return quantized_gather_offset(layout, param) +
         static_cast<std::size_t>(layout.modes.shard_ranks) * block_quant_bytes(place.shape.shard);
}

std::size_t quantized_bucket_offset(const StateModes& modes, std::size_t block) {
  return align_packed(block * static_cast<std::size_t>(modes.shard_ranks) * dtype_size(modes.wire));
}

std::size_t bucket_buffer_bytes(const StateModes& modes, std::size_t block) {
  const std::size_t gradients =
      block * static_cast<std::size_t>(modes.shard_ranks) * dtype_size(modes.wire);
  if (!modes.quantized_gradients || block == 0) return gradients;
  return quantized_bucket_offset(modes, block) +
         2 * static_cast<std::size_t>(modes.shard_ranks) * block_quant_bytes(block);
}

StateModes state_modes(const config::Config& config, int world) {
  StateModes m;
  m.stage = config.zero.stage;
  m.shard_ranks = m.stage == 0 ? 1 : config.zero.shard_size > 0 ? config.zero.shard_size : world;
  m.replicas = m.stage == 0 ? 1 : world / m.shard_ranks;
  m.hpz_ranks = m.stage == 3 ? config.zero.hpz_size : 0;
  m.quantized_weights = m.stage == 3 && m.shard_ranks > 1 && config.zero.quantized_weights;
  m.quantized_gradients = m.stage >= 1 && m.shard_ranks > 1 && config.zero.quantized_gradients &&
                          config.zero.reduce_scatter;
  m.compute = config.compute_dtype();
  m.accum = config.grad_accum_dtype;
  m.wire = config.communication_data_type;
  m.mixed = m.compute != DType::f32;
  m.optimizer_offload = config.zero.offload_optimizer.device != config::OffloadDevice::none;
  m.optimizer_nvme = config.zero.offload_optimizer.device == config::OffloadDevice::nvme;
  m.grad_nvme = m.optimizer_nvme && m.grad_shard();
  m.param_offload = m.stage == 3 && config.zero.offload_param.device != config::OffloadDevice::none;
  m.param_nvme = m.param_offload && config.zero.offload_param.device == config::OffloadDevice::nvme;
  m.speculate = m.optimizer_offload && config.zero.offload_optimizer.super_offload;
  m.speculation_rollback =
      m.speculate && (config.gradient_clipping > 0.0 || config.checks_grad_overflow());
  return m;
}

Layout plan_layout(const Registry& registry, const config::Config& config, int world) {
  Layout layout;
  layout.modes = state_modes(config, world);
  layout.world = world;
  const StateModes& m = layout.modes;
  const auto& specs = registry.params();
  layout.params.assign(specs.size(), {});
  layout.trainable_pos.assign(specs.size(), kNone);
  std::vector<std::size_t> trainable_numels;
  std::vector<std::size_t> compute_numels(specs.size(), 0);
  for (std::size_t p = 0; p < specs.size(); ++p) {
    layout.params[p].shape = shard_shape(specs[p].numel, m.shard_ranks);
    if (specs[p].trainable) {
      layout.trainable_pos[p] = layout.trainable.size();
      layout.trainable.push_back(p);
      trainable_numels.push_back(specs[p].numel);
    }
    // Stage 3 gathers from compute shards in the device's memory: fp32 trainable parameters
    // have none (the master is it) unless the master is offloaded.
    if (!specs[p].trainable || m.mixed || m.optimizer_offload || m.param_offload) {
      compute_numels[p] = specs[p].numel;
    }
  }
  layout.owned = flat_layout(trainable_numels, m.shard_ranks);
  std::uint64_t global = 0;
  for (std::size_t t = 0; t < layout.trainable.size(); ++t) {
    ParamPlacement& place = layout.params[layout.trainable[t]];
    place.flat = layout.owned.offset[t];
    place.global_first = global;
    global += specs[layout.trainable[t]].numel;
  }
  if (m.stage == 3) {
    layout.compute_shards = flat_layout(compute_numels, m.shard_ranks);
    // Persistent: smaller than stage3_param_persistence_threshold, in registration order while
    // their total stays within stage3_model_persistence_threshold.
    const auto each_limit = static_cast<std::size_t>(config.zero.param_persistence_threshold);
    const auto total_limit = static_cast<std::size_t>(config.zero.model_persistence_threshold);
    std::size_t persistent_total = 0;
    for (std::size_t p = 0; p < specs.size(); ++p) {
      if (compute_numels[p] != 0) layout.params[p].compute_flat = layout.compute_shards.offset[p];
      if (specs[p].numel < each_limit && persistent_total + specs[p].numel <= total_limit) {
        layout.params[p].persistent = true;
        persistent_total += specs[p].numel;
      }
    }
    // hpZ: every gathered parameter's shard over the secondary group, one after another.
    if (m.hpz_ranks > 1) {
      std::vector<std::size_t> secondary_numels(specs.size(), 0);
      for (std::size_t p = 0; p < specs.size(); ++p) {
        if (!layout.params[p].persistent) secondary_numels[p] = specs[p].numel;
      }
      layout.secondary = flat_layout(secondary_numels, m.hpz_ranks);
      for (std::size_t p = 0; p < specs.size(); ++p) {
        if (secondary_numels[p] == 0) continue;
        layout.params[p].secondary = shard_shape(specs[p].numel, m.hpz_ranks);
        layout.params[p].secondary_flat = layout.secondary.offset[p];
      }
    }
  }
  plan_reduction(registry, config, layout);

  // Step groups, in registration order, so each rank's pieces of one are a contiguous range of
  // its owned flat buffers (what NVMe sub-groups read and write).
  std::vector<std::size_t> order(layout.trainable.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::size_t per_rank = static_cast<std::size_t>(-1) / static_cast<std::size_t>(m.shard_ranks);
  const auto sub_group = static_cast<std::size_t>(config.zero.sub_group_size);
  if (m.stage == 1 || m.stage == 2) {
    per_rank = static_cast<std::size_t>(config.zero.allgather_bucket_size) /
               static_cast<std::size_t>(m.shard_ranks);
    if (m.optimizer_nvme) per_rank = std::min(per_rank, sub_group);
  } else if (m.optimizer_offload || m.param_nvme) {
    per_rank = step_group_size(config, m);  // bounds the staging of updated compute values
  }
  layout.step_groups =
      plan_buckets(order, trainable_numels, m.shard_ranks,
                   std::max<std::size_t>(per_rank, 1) * static_cast<std::size_t>(m.shard_ranks));
  for (const Bucket& group : layout.step_groups) {
    const BucketPiece& first = group.pieces.front();
    layout.group_lo.push_back(layout.params[layout.trainable[first.param]].flat + first.begin);
  }
  // With NVMe, whole groups from the first stay in memory while they fit in max_in_cpu.
  layout.resident_groups = layout.step_groups.size();
  layout.resident_end = layout.owned.total;
  if (m.optimizer_nvme) {
    const auto max_in_cpu = static_cast<std::size_t>(config.zero.offload_optimizer.max_in_cpu);
    layout.resident_groups = 0;
    layout.resident_end = 0;
    while (layout.resident_groups < layout.step_groups.size() &&
           layout.resident_end + layout.step_groups[layout.resident_groups].block <= max_in_cpu) {
      layout.resident_end += layout.step_groups[layout.resident_groups++].block;
    }
  }

  // Compute shards in host memory: all of them, or with NVMe those within max_in_cpu.
  if (m.param_offload) {
    layout.compute_resident_end = layout.compute_shards.total;
    if (m.param_nvme) {
      const auto max_in_cpu = static_cast<std::size_t>(config.zero.offload_param.max_in_cpu);
      layout.compute_resident_end = 0;
      for (std::size_t p = 0; p < specs.size(); ++p) {
        if (layout.params[p].compute_flat == kNone) continue;
        const std::size_t end =
            layout.params[p].compute_flat + shard_shape(specs[p].numel, m.shard_ranks).shard;
        if (end > max_in_cpu) break;
        layout.compute_resident_end = end;
      }
      const auto buffer_size = static_cast<std::size_t>(config.zero.offload_param.buffer_size);
      for (std::size_t p = 0; p < specs.size(); ++p) {
        const std::size_t shard = shard_shape(specs[p].numel, m.shard_ranks).shard;
        if (layout.params[p].compute_flat == kNone || shard <= buffer_size) continue;
        throw make_error(ErrorCategory::config,
                         "parameter '{}': its shard of {} elements is larger than "
                         "zero_optimization.offload_param.buffer_size ({}); set buffer_size to "
                         "at least {}",
                         specs[p].name, shard, buffer_size, shard);
      }
    }
  }
  return layout;
}

bool bucket_sized_step_groups(const config::Config& config, const StateModes& modes) {
  return modes.stage == 3 && modes.speculate && !modes.optimizer_nvme && !modes.param_nvme &&
         config.zero.sub_group_size_auto;
}

std::size_t step_group_size(const config::Config& config, const StateModes& modes) {
  // super_offload steps a group once the last bucket holding part of it is reduced: groups of
  // a bucket's size become final one after another through backward, where the default 1e9
  // would make one or two groups of a model and leave most of the step after it.
  if (bucket_sized_step_groups(config, modes)) {
    return std::max<std::size_t>(static_cast<std::size_t>(config.zero.reduce_bucket_size) /
                                     static_cast<std::size_t>(modes.shard_ranks),
                                 1);
  }
  return static_cast<std::size_t>(config.zero.sub_group_size);
}

bool speculation_places_early(const StateModes& modes) {
  return modes.speculate && modes.stage == 3 && !modes.param_nvme;
}

std::size_t reduce_staging_slots(const Layout& layout, bool beside) {
  if (!beside || !layout.modes.optimizer_offload) return 1;
  return std::clamp<std::size_t>(layout.buckets.size(), 1, kReduceStagingSlots);
}

bool pinned_offload(std::optional<bool> pin_memory, bool beside) {
  return pin_memory.value_or(beside);
}

bool identity_reduction(const config::Config& config, const Layout& layout) {
  const StateModes& m = layout.modes;
  return layout.world == 1 && m.stage == 0 && !m.grad_shard() && m.wire == m.compute &&
         !config.prescale_gradients && config.gradient_predivide_factor == 1.0;
}

bool direct_reduce(const Layout& layout, bool beside) {
  return beside && layout.modes.optimizer_offload && !layout.modes.grad_nvme &&
         layout.modes.grad_shard() && !layout.buckets.empty();
}

std::string super_offload_auto_unused(const config::Config& config, bool gpu) {
  const config::OffloadOptimizerConfig& offload = config.zero.offload_optimizer;
  if (offload.device == config::OffloadDevice::none) return "the optimizer is not offloaded";
  if (!offload.super_offload_auto) return "the config sets super_offload";
  if (!gpu) return "not beside a GPU: the CPU optimizer would share its cores with backward";
  if (offload.device != config::OffloadDevice::cpu) {
    return "the optimizer state is on NVMe (its second regions would take disk: set "
           "super_offload true to have them)";
  }
  if (config.zero.stage < 1) return "stage 0";
  if (offload.cpuadam_cores_perc <= 0.0) return "cpuadam_cores_perc is 0";
  return "";
}

bool device_accumulation(const config::Config& config, const Layout& layout, bool beside) {
  return device_accumulation_unused(config, layout, beside).empty() &&
         config.zero.offload_optimizer.accumulate_on_device;
}

std::string device_accumulation_unused(const config::Config& config, const Layout& layout,
                                       bool beside) {
  if (!config.zero.offload_optimizer.accumulate_on_device) return "";
  if (!beside) return "the engine runs on the CPU device, whose memory is the host's";
  if (layout.modes.grad_nvme) return "the offloaded gradients are swapped to NVMe";
  if (!direct_reduce(layout, beside)) return "no reduced gradient comes down from the device";
  if (layout.modes.stage < 2) {
    return "stages 0-1 reduce once a window, from gradients accumulated on the device already";
  }
  if (config.batch.gradient_accumulation_steps <= 1) return "gradient_accumulation_steps is 1";
  return "";
}

std::size_t reduce_device_sums_offset(const Layout& layout) {
  std::size_t largest = 0;
  for (const Bucket& b : layout.buckets) largest = std::max(largest, b.block);
  return align_up(largest * dtype_size(layout.modes.accum));
}

std::size_t param_staging_buffers(const Layout& layout, bool beside) {
  if (!beside || !layout.modes.optimizer_offload) return 1;
  return std::clamp<std::size_t>(layout.step_groups.size(), 1, kParamStagingBuffers);
}

std::size_t early_staging_buffers(const Layout& layout) {
  return std::min<std::size_t>(2, layout.step_groups.size());
}

std::size_t largest_step_group(const Layout& layout) {
  std::size_t largest = 0;
  for (const Bucket& group : layout.step_groups) largest = std::max(largest, group.block);
  return largest;
}

std::size_t speculation_staging_elements(const Layout& layout) {
  if (speculation_places_early(layout.modes)) {
    return early_staging_buffers(layout) * largest_step_group(layout);
  }
  return speculation_staging_offsets(layout).back();
}

std::vector<std::size_t> speculation_staging_offsets(const Layout& layout) {
  std::vector<std::size_t> offsets{0};
  for (const Bucket& group : layout.step_groups) offsets.push_back(offsets.back() + group.block);
  return offsets;
}

std::size_t ArenaPlan::held_total() const noexcept {
  return std::accumulate(held.begin(), held.end(), std::size_t{0});
}

std::size_t ArenaPlan::peak_total() const noexcept {
  return std::accumulate(peak.begin(), peak.end(), std::size_t{0});
}

std::array<const ArenaPlan*, 7> MemoryPlan::arenas() const noexcept {
  return {&state, &grad, &gather, &offload, &param, &nvme, &param_nvme};
}

std::size_t MemoryPlan::reserved(Tier tier) const noexcept {
  std::size_t bytes = 0;
  for (const ArenaPlan* arena : arenas()) {
    if (arena->tier == tier) bytes += arena->capacity;
  }
  if (tier == Tier::device) bytes += device_scratch_bytes;
  if (tier == Tier::host) bytes += host_scratch_bytes;
  if (tier == Tier::pinned) bytes += pinned_scratch_bytes;
  return bytes;
}

MemoryPlan plan_memory(const Registry& registry, const config::Config& config, const Layout& layout,
                       bool beside) {
  MemoryPlan plan;
  plan_buffers(config, layout, beside, plan);
  const std::size_t swap_region = plan_optimizer_swap(config, layout, plan);
  const std::size_t bounce = plan_param_swap(registry, config, layout, plan);
  plan_blocks(registry, config, layout, swap_region, bounce, plan);
  size_block_arenas(config, layout, beside, plan);
  plan_grad_arena(registry, layout, plan);
  plan_gather_arena(registry, config, layout, plan);
  return plan;
}

}  // namespace zero::engine
