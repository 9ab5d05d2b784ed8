// Where the model state lives: the layout of each rank's owned flat buffers, the arenas and
// the blocks carved from them, and the initial values. What each stage holds per rank is
// docs/design.md's table; README "Memory" lists the buffers beside it.
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "engine/engine_impl.h"

namespace zero::engine {
namespace {

constexpr std::size_t kAlign = Arena::kDefaultAlignment;

std::size_t align_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

std::size_t Engine::Impl::owned_valid(std::size_t param) const {
  return params[param].shape.valid(stage == 0 ? 0 : rank);
}

Device& Engine::Impl::state_device() { return offload ? host_device() : *device; }

Device& Engine::Impl::host_device() { return host ? *host : *device; }

float* Engine::Impl::state_scalars() { return offload && host ? host_scalars : scalars; }

float* Engine::Impl::master_of(std::size_t param) {
  if (master == nullptr) return static_cast<float*>(params[param].full);  // fp32, stage 0
  return master + params[param].flat;
}

void* Engine::Impl::shard_source(std::size_t param) {
  const ParamState& state = params[param];
  if (swapped_param(param)) return nullptr;  // on NVMe: fetch_shard reads it
  if (state.compute_flat != kNone) {
    return static_cast<char*>(compute_shard) + state.compute_flat * dtype_size(compute);
  }
  return master + state.flat;  // fp32 trainable: the master is the compute shard
}

void Engine::Impl::lay_out() {
  const auto& specs = registry.params();
  std::vector<std::size_t> trainable_numels;
  std::vector<std::size_t> compute_numels(specs.size(), 0);
  for (std::size_t p = 0; p < specs.size(); ++p) {
    params[p].shape = shard_shape(specs[p].numel, shard_ranks);
    if (specs[p].trainable) {
      trainable.push_back(p);
      trainable_numels.push_back(specs[p].numel);
    }
    // Stage 3 gathers from compute shards in the device's memory: fp32 trainable parameters
    // have none (the master is it) unless the master is offloaded.
    if (!specs[p].trainable || mixed || offload || param_offload) {
      compute_numels[p] = specs[p].numel;
    }
  }
  owned = flat_layout(trainable_numels, shard_ranks);
  owned_total = owned.total;
  std::uint64_t global = 0;
  for (std::size_t t = 0; t < trainable.size(); ++t) {
    params[trainable[t]].flat = owned.offset[t];
    params[trainable[t]].global_first = global;
    global += specs[trainable[t]].numel;
  }
  if (stage == 3) {
    compute_shards = flat_layout(compute_numels, world);
    // Persistent: smaller than stage3_param_persistence_threshold, in registration order while
    // their total stays within stage3_model_persistence_threshold.
    const auto each_limit = static_cast<std::size_t>(config.zero.param_persistence_threshold);
    const auto total_limit = static_cast<std::size_t>(config.zero.model_persistence_threshold);
    std::size_t persistent_total = 0;
    for (std::size_t p = 0; p < specs.size(); ++p) {
      if (compute_numels[p] != 0) params[p].compute_flat = compute_shards.offset[p];
      if (specs[p].numel < each_limit && persistent_total + specs[p].numel <= total_limit) {
        params[p].persistent = true;
        persistent_total += specs[p].numel;
      }
    }
  }
  plan_reduction();
  // Groups of registration order, so each rank's pieces of one are a contiguous range of its
  // owned flat buffers (what NVMe sub-groups read and write).
  std::vector<std::size_t> order(trainable.size());
  for (std::size_t t = 0; t < order.size(); ++t) order[t] = t;
  std::size_t per_rank = static_cast<std::size_t>(-1) / static_cast<std::size_t>(shard_ranks);
  const auto sub_group = static_cast<std::size_t>(config.zero.sub_group_size);
  if (stage == 1 || stage == 2) {
    per_rank = static_cast<std::size_t>(config.zero.allgather_bucket_size) /
               static_cast<std::size_t>(world);
    if (nvme) per_rank = std::min(per_rank, sub_group);
  } else if (offload || param_nvme) {
    per_rank = sub_group;  // bounds the staging of updated compute values
  }
  step_groups = plan_buckets(order, trainable_numels, shard_ranks,
                             std::max<std::size_t>(per_rank, 1) * static_cast<std::size_t>(shard_ranks));
  group_lo.clear();
  for (const Bucket& group : step_groups) {
    const BucketPiece& first = group.pieces.front();
    group_lo.push_back(params[trainable[first.param]].flat + first.begin);
  }
  // With NVMe, whole groups from the first stay in memory while they fit in max_in_cpu.
  resident_groups = step_groups.size();
  resident_end = owned_total;
  if (nvme) {
    const auto max_in_cpu = static_cast<std::size_t>(config.zero.offload_optimizer.max_in_cpu);
    resident_groups = 0;
    resident_end = 0;
    while (resident_groups < step_groups.size() &&
           resident_end + step_groups[resident_groups].block <= max_in_cpu) {
      resident_end += step_groups[resident_groups++].block;
    }
  }
}

void Engine::Impl::allocate() {
  const std::size_t csize = dtype_size(compute);
  const auto& specs = registry.params();
  const bool full_params = stage <= 2;
  const bool full_grads = stage <= 1;
  const bool has_master = mixed || stage >= 1;
  const bool has_grad_flat = stage >= 1 || accum != compute;
  const int state_buffers = config.optimizer.state_buffers();

  std::size_t largest_bucket = 0;
  for (const Bucket& b : buckets) largest_bucket = std::max(largest_bucket, b.block);
  std::size_t largest_group = 0;
  for (const Bucket& b : step_groups) largest_group = std::max(largest_group, b.block);
  const std::size_t largest_gather = (stage == 1 || stage == 2) ? largest_group : 0;
  const std::size_t bucket_count = config.zero.overlap_comm ? 2 : 1;
  const std::size_t bucket_bytes = largest_bucket * shard_ranks * dtype_size(wire);

  // What the state arena holds, to size it exactly.
  std::size_t capacity = 0;
  for (std::size_t p = 0; p < specs.size(); ++p) {
    if (full_params) capacity += align_up(specs[p].numel * csize);
    if (full_grads && specs[p].trainable) capacity += align_up(specs[p].numel * csize);
  }
  // The owned state: in this arena, or with offload in a pinned one.
  // With NVMe only the resident part of the masters and moments is in memory.
  std::size_t owned_capacity = 0;
  if (has_master) owned_capacity += align_up(resident_end * 4);
  if (has_grad_flat) owned_capacity += align_up(owned_total * dtype_size(accum));
  const std::size_t state_size = dtype_size(config.optimizer_state_dtype);
  owned_capacity += state_buffers * align_up(resident_end * state_size);
  const std::size_t swap_buffers_bytes = nvme ? swap_buffer_bytes() : 0;
  owned_capacity += swap_buffers_bytes;
  const std::size_t reduce_staging_bytes = offload ? largest_bucket * dtype_size(wire) : 0;
  const std::size_t param_staging_bytes = offload || param_nvme ? largest_group * csize : 0;
  if (offload) {
    owned_capacity += align_up(reduce_staging_bytes) + align_up(param_staging_bytes);
    // DeepSpeed's pin_memory: page-locked memory copies faster and asynchronously, pageable
    // memory costs nothing beyond itself.
    const bool pinned = config.zero.offload_optimizer.pin_memory;
    offload_arena = std::make_unique<Arena>(
        device.get(), pinned ? Tier::pinned : Tier::host,
        std::max<std::size_t>(owned_capacity, kAlign),
        pinned ? "offloaded optimizer state (pinned)" : "offloaded optimizer state (pageable)");
  } else {
    capacity += owned_capacity;
  }
  if (stage == 3 && !param_offload) capacity += align_up(compute_shards.total * csize);
  if (!buckets.empty()) capacity += bucket_count * align_up(bucket_bytes);
  capacity += align_up(largest_gather * world * csize);
  state_arena = std::make_unique<Arena>(device.get(), Tier::device, std::max<std::size_t>(capacity, kAlign),
                                        "model state");

  Stream& stream = device->default_stream();
  auto take_from = [&](Arena& arena, MemoryKind kind, std::size_t bytes) -> void* {
    if (bytes == 0) return nullptr;
    Block block = arena.allocate(kind, bytes);
    state_blocks.push_back(block);
    return block.ptr;
  };
  auto take = [&](MemoryKind kind, std::size_t bytes) {
    return take_from(*state_arena, kind, bytes);
  };
  Arena& owned_arena = offload ? *offload_arena : *state_arena;
  Device& owned_device = state_device();
  Stream& owned_stream = owned_device.default_stream();
  auto take_owned = [&](MemoryKind kind, std::size_t bytes) {
    return take_from(owned_arena, kind, bytes);
  };
  for (std::size_t p = 0; p < specs.size(); ++p) {
    if (full_params) params[p].full = take(MemoryKind::param, specs[p].numel * csize);
    if (full_grads && specs[p].trainable) {
      params[p].grad = take(MemoryKind::grad, specs[p].numel * csize);
      device->fill(params[p].grad, compute, specs[p].numel, 0.0f, stream);
    }
  }
  if (has_master) {
    master = static_cast<float*>(take_owned(MemoryKind::master, resident_end * 4));
    if (master != nullptr) owned_device.fill(master, DType::f32, resident_end, 0.0f, owned_stream);
  }
  if (has_grad_flat) {
    grad_flat = take_owned(MemoryKind::grad, owned_total * dtype_size(accum));
    owned_device.fill(grad_flat, accum, owned_total, 0.0f, owned_stream);
  }
  for (int s = 0; s < state_buffers; ++s) {
    moments[s] = take_owned(MemoryKind::moment, resident_end * state_size);
    if (moments[s] != nullptr) {
      owned_device.fill(moments[s], config.optimizer_state_dtype, resident_end, 0.0f,
                        owned_stream);
    }
  }
  reduce_staging = take_owned(MemoryKind::buffer, reduce_staging_bytes);
  if (offload) param_staging = take_owned(MemoryKind::buffer, param_staging_bytes);
  owned_stream.synchronize();
  if (nvme) set_up_swap();
  if (stage == 3 && param_offload) {
    // The compute shards in host memory (with NVMe, those within max_in_cpu), and with NVMe
    // the two bounce buffers and, without optimizer offload, the staging of updated values.
    compute_resident_end = compute_shards.total;
    std::size_t bounce = 0;
    if (param_nvme) {
      const auto max_in_cpu = static_cast<std::size_t>(config.zero.offload_param.max_in_cpu);
      compute_resident_end = 0;
      for (std::size_t p = 0; p < specs.size(); ++p) {
        if (params[p].compute_flat == kNone) continue;
        const std::size_t end = params[p].compute_flat + shard_shape(specs[p].numel, world).shard;
        if (end > max_in_cpu) break;
        compute_resident_end = end;
      }
      const auto buffer_size = static_cast<std::size_t>(config.zero.offload_param.buffer_size);
      for (std::size_t p = 0; p < specs.size(); ++p) {
        const std::size_t shard = shard_shape(specs[p].numel, world).shard;
        if (params[p].compute_flat == kNone || shard <= buffer_size) continue;
        throw make_error(ErrorCategory::config,
                         "parameter '{}': its shard of {} elements is larger than "
                         "zero_optimization.offload_param.buffer_size ({}); set buffer_size to at "
                         "least {}",
                         specs[p].name, shard, buffer_size, shard);
      }
      std::size_t largest = 0;
      for (std::size_t p = 0; p < specs.size(); ++p) {
        if (params[p].compute_flat != kNone) largest = std::max(largest, param_region_bytes(p));
      }
      bounce = largest + 4096;
    }
    const std::size_t bounces =
        param_nvme ? 3 + static_cast<std::size_t>(config.zero.offload_param.buffer_count) : 0;
    const bool pinned = config.zero.offload_param.pin_memory;
    const std::size_t staging = offload ? 0 : align_up(param_staging_bytes);
    param_arena = std::make_unique<Arena>(
        device.get(), pinned ? Tier::pinned : Tier::host,
        std::max<std::size_t>(align_up(compute_resident_end * csize) + bounces * bounce + staging,
                              kAlign),
        pinned ? "offloaded compute shards (pinned)" : "offloaded compute shards (pageable)");
    compute_shard = take_from(*param_arena, MemoryKind::param, compute_resident_end * csize);
    if (compute_shard != nullptr) {
      host_device().fill(compute_shard, compute, compute_resident_end, 0.0f,
                         host_device().default_stream());
      host_device().default_stream().synchronize();
    }
    if (!offload) param_staging = take_from(*param_arena, MemoryKind::buffer, param_staging_bytes);
    if (param_nvme) set_up_param_swap();
  } else if (stage == 3) {
    compute_shard = take(MemoryKind::param, compute_shards.total * csize);
    device->fill(compute_shard, compute, compute_shards.total, 0.0f, stream);
  }
  if (!buckets.empty()) {
    for (std::size_t i = 0; i < bucket_count; ++i) {
      bucket_buffers.push_back(take(MemoryKind::buffer, bucket_bytes));
    }
    in_flight.resize(bucket_count);
  }
  gather_buffer = take(MemoryKind::buffer, largest_gather * world * csize);

  // Stages 2-3: full gradients live from a module's pre_backward until the bucket holding
  // their last piece is issued, and buckets issue in order once all their parameters are
  // ready. Sized by walking the planned backward (modules in reverse registration order) as
  // the hooks run it: the most bytes live at once, plus a quarter for hooks that run in
  // another order.
  if (stage >= 2) {
    std::vector<std::size_t> uses(specs.size(), 0), waiting(buckets.size(), 0);
    std::vector<bool> live(specs.size(), false);
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      for (std::size_t i = 0; i < buckets[b].pieces.size(); ++i) {
        if (i == 0 || buckets[b].pieces[i].param != buckets[b].pieces[i - 1].param) ++waiting[b];
      }
    }
    std::size_t now = 0, peak = 0, next = 0;
    for (std::size_t m = registry.module_count(); m-- > 0;) {
      for (std::size_t p : registry.module(m).params) {
        if (!specs[p].trainable || live[p] || uses[p] > 0) continue;
        live[p] = true;
        now += align_up(specs[p].numel * csize);
      }
      peak = std::max(peak, now);
      for (std::size_t p : registry.module(m).params) {
        if (!specs[p].trainable || ++uses[p] != specs[p].modules.size()) continue;
        for (std::size_t b : param_buckets[trainable_pos[p]]) waiting[b] -= 1;
      }
      for (; next < buckets.size() && waiting[next] == 0; ++next) {
        for (const BucketPiece& piece : buckets[next].pieces) {
          const std::size_t p = trainable[piece.param];
          if (live[p] && param_buckets[piece.param].back() == next) {
            live[p] = false;
            now -= align_up(specs[p].numel * csize);
          }
        }
      }
    }
    const std::size_t grad_capacity = peak + peak / 4 + (std::size_t{1} << 20);
    grad_arena = std::make_unique<Arena>(device.get(), Tier::device, grad_capacity,
                                         "gradients (stage 2-3, while live)");
  }
  // Stage 3: gathered parameters. Persistent ones stay. Of the others, the hooks open at once
  // hold their modules' (room for two of the largest modules), and what is kept for reuse or
  // fetched ahead is admitted only under stage3_max_live_parameters; a fetch ahead that does
  // not fit is not issued, and an own gather that does not fit first releases those.
  if (stage == 3) {
    std::size_t persistent = 0, others = 0, largest_module = 0;
    for (std::size_t p = 0; p < specs.size(); ++p) {
      const std::size_t bytes = align_up(params[p].shape.padded() * csize);
      (params[p].persistent ? persistent : others) += bytes;
    }
    for (const ModuleSpec& m : registry.modules()) {
      std::size_t bytes = 0;
      for (std::size_t p : m.params) bytes += align_up(params[p].shape.padded() * csize);
      largest_module = std::max(largest_module, bytes);
    }
    const std::size_t live_limit =
        static_cast<std::size_t>(config.zero.max_live_parameters) * csize;
    const std::size_t gather_capacity =
        persistent + std::min(others, 2 * largest_module + std::min(live_limit, others)) +
        kAlign;
    gather_arena = std::make_unique<Arena>(device.get(), Tier::device,
                                           std::max<std::size_t>(gather_capacity, kAlign),
                                           "gathered parameters (stage 3)");
  }

  optim::Formats formats;
  formats.grad = has_grad_flat ? accum : compute;
  formats.state = config.optimizer_state_dtype;
  formats.param_out = mixed ? compute : DType::bf16;
  if (device->type() == DeviceType::cuda && !offload) {
    optimizer = optim::create_cuda_optimizer(config.optimizer, formats);
  } else {
    optim::CpuOptimizerOptions cpu;
    cpu.threads = options.optimizer_threads > 0 ? options.optimizer_threads : 1;
    optimizer = optim::create_cpu_optimizer(config.optimizer, formats, cpu);
  }
  stream.synchronize();
}

}  // namespace zero::engine
