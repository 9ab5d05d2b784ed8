// Where the model state lives: the layout of each rank's owned flat buffers, the arenas and
// the blocks carved from them, and the initial values. What each stage holds per rank is
// docs/design.md's table; README "Memory" lists the buffers beside it.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <utility>

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

  // Stages 2-3: full gradients live from a module's pre_backward to their reduction. Sized by
  // walking the planned backward (modules in reverse registration order): the most bytes live
  // at once, plus a quarter for hooks that run in another order.
  if (stage >= 2) {
    std::vector<std::size_t> uses(specs.size(), 0);
    std::vector<bool> live(specs.size(), false);
    std::size_t now = 0, peak = 0;
    for (std::size_t m = registry.module_count(); m-- > 0;) {
      for (std::size_t p : registry.module(m).params) {
        if (!specs[p].trainable || live[p] || uses[p] == specs[p].modules.size()) continue;
        live[p] = true;
        now += align_up(specs[p].numel * csize);
      }
      peak = std::max(peak, now);
      for (std::size_t p : registry.module(m).params) {
        if (!specs[p].trainable) continue;
        if (++uses[p] == specs[p].modules.size() && live[p]) {
          live[p] = false;
          now -= align_up(specs[p].numel * csize);
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

namespace {

// The fp32 values of global elements [begin, begin + count) of a parameter.
void initial_range(const InitialValue& initial, const std::vector<float>& broadcast,
                   std::uint64_t begin, std::size_t count, float* out) {
  if (count == 0) return;
  if (initial.initializer) {
    initial.initializer(begin, count, out);
  } else if (!broadcast.empty()) {
    std::memcpy(out, broadcast.data() + begin, count * sizeof(float));
  } else {
    std::fill(out, out + count, 0.0f);
  }
}

}  // namespace

void Engine::Impl::fill_initial_values() {
  Stream& stream = device->default_stream();
  const auto& specs = registry.params();
  // Host values go through a device-tier staging area (the device's kernels read device memory).
  std::size_t largest = 1;
  for (const auto& spec : specs) largest = std::max(largest, spec.numel);
  const std::size_t staging_bytes = largest * sizeof(float);
  float* staging = static_cast<float*>(device->reserve(Tier::device, staging_bytes));
  auto upload = [&](void* dst, DType dtype, const float* host, std::size_t count) {
    if (count == 0) return;
    device->copy(staging, host, count * sizeof(float));
    device->cast(staging, DType::f32, dst, dtype, count, stream);
    stream.synchronize();
  };

  // Which parameters rank 0 passed values for: one all-reduce for them all, since every rank
  // takes part in each broadcast whatever it passed.
  std::vector<float> from_root(std::max<std::size_t>(specs.size(), 1), 0.0f);
  for (std::size_t p = 0; p < specs.size(); ++p) {
    if (rank == 0 && !params[p].initial.initializer && params[p].initial.values != nullptr) {
      from_root[p] = 1.0f;
    }
  }
  const std::size_t flag_bytes = from_root.size() * sizeof(float);
  auto* flags = static_cast<float*>(device->reserve(Tier::device, flag_bytes));
  device->copy(flags, from_root.data(), flag_bytes);
  try {
    comm->all_reduce(flags, from_root.size(), DType::f32, ReduceOp::max).wait();
  } catch (...) {
    device->unreserve(Tier::device, flags, flag_bytes);
    device->unreserve(Tier::device, staging, staging_bytes);
    throw;
  }
  device->copy(from_root.data(), flags, flag_bytes);
  device->unreserve(Tier::device, flags, flag_bytes);

  try {
    std::vector<float> values;
    std::vector<float> broadcast;
    for (std::size_t p = 0; p < specs.size(); ++p) {
      const ParamSpec& spec = specs[p];
      ParamState& state = params[p];
      broadcast.clear();
      if (!state.initial.initializer) {
        if (from_root[p] != 0.0f && spec.numel > 0) {
          if (rank == 0) device->copy(staging, state.initial.values, spec.numel * sizeof(float));
          comm->broadcast(staging, spec.numel, DType::f32, 0).wait();
          broadcast.resize(spec.numel);
          device->copy(broadcast.data(), staging, spec.numel * sizeof(float));
        }
      }
      const ShardShape world_shape = shard_shape(spec.numel, world);
      if (stage <= 2) {
        // The whole parameter, asked for one world shard at a time.
        values.assign(spec.numel, 0.0f);
        for (int q = 0; q < world; ++q) {
          initial_range(state.initial, broadcast, world_shape.begin(q), world_shape.valid(q),
                        values.data() + world_shape.begin(q));
        }
        upload(state.full, compute, values.data(), spec.numel);
        if (spec.trainable && offload) {
          put_master(state.flat, values.data() + state.shape.begin(rank), state.shape.valid(rank));
        } else if (spec.trainable && master != nullptr) {
          const int r = stage == 0 ? 0 : rank;
          upload(master + state.flat, DType::f32, values.data() + state.shape.begin(r),
                 state.shape.valid(r));
        }
      } else {
        const std::size_t count = world_shape.valid(rank);
        values.assign(count, 0.0f);
        initial_range(state.initial, broadcast, world_shape.begin(rank), count, values.data());
        if (spec.trainable && offload) {
          put_master(state.flat, values.data(), count);
        } else if (spec.trainable) {
          upload(master + state.flat, DType::f32, values.data(), count);
        }
        if (swapped_param(p)) {
          const std::size_t bytes = param_region_bytes(p);
          std::memset(param_bounce[0], 0, bytes);
          host_device().cast(values.data(), DType::f32, param_bounce[0], compute, count,
                             host_device().default_stream());
          host_device().default_stream().synchronize();
          store_shard(p, 0);
        } else if (state.compute_flat != kNone && param_offload) {
          // Host memory: cast on the host.
          host_device().cast(values.data(), DType::f32,
                             static_cast<char*>(compute_shard) +
                                 state.compute_flat * dtype_size(compute),
                             compute, count, host_device().default_stream());
          host_device().default_stream().synchronize();
        } else if (state.compute_flat != kNone) {
          upload(static_cast<char*>(compute_shard) + state.compute_flat * dtype_size(compute),
                 compute, values.data(), count);
        }
      }
      state.initial = {};
    }
  } catch (...) {
    device->unreserve(Tier::device, staging, staging_bytes);
    throw;
  }
  device->unreserve(Tier::device, staging, staging_bytes);
  finish_masters();
}

std::size_t Engine::Impl::group_at(std::size_t flat) const {
  const auto it = std::upper_bound(group_lo.begin(), group_lo.end(), flat);
  return static_cast<std::size_t>(it - group_lo.begin()) - 1;
}

// Offload: the master is in host memory (resident) or in the swap, never where the device's
// kernels write, so the values are copied by the host.
void Engine::Impl::put_master(std::size_t flat, const float* values, std::size_t count) {
  while (count > 0) {
    if (flat < resident_end) {
      const std::size_t n = std::min(count, resident_end - flat);
      std::memcpy(master + flat, values, n * sizeof(float));
      flat += n, values += n, count -= n;
      continue;
    }
    // The swapped groups are filled in order; one skipped (no values) is written as zeros.
    const std::size_t g = group_at(flat);
    const std::size_t s = g - resident_groups;
    if (filling != s) {
      const std::size_t from = filling == kNone ? 0 : filling + 1;
      if (filling != kNone) swap->commit(filling);
      for (std::size_t k = from; k < s; ++k) {
        swap->fill(k);
        swap->commit(k);
      }
      swap->fill(s);
      filling = s;
    }
    const GroupView view = swap->filled(s);
    const std::size_t group_end = group_lo[g] + step_groups[g].block;
    const std::size_t n = std::min(count, group_end - flat);
    std::memcpy(view.master + (flat - group_lo[g]), values, n * sizeof(float));
    flat += n, values += n, count -= n;
  }
}

void Engine::Impl::finish_masters() {
  if (!swap) return;
  const std::size_t from = filling == kNone ? 0 : filling + 1;
  if (filling != kNone) swap->commit(filling);
  for (std::size_t k = from; k < swap->groups(); ++k) {
    swap->fill(k);
    swap->commit(k);
  }
  swap->finish();
  filling = kNone;
}

void Engine::Impl::copy_master(std::size_t flat, std::size_t count, float* out) {
  while (count > 0) {
    if (flat < resident_end) {
      const std::size_t n = std::min(count, resident_end - flat);
      device->copy(out, master + flat, n * sizeof(float));
      flat += n, out += n, count -= n;
      continue;
    }
    const std::size_t g = group_at(flat);
    const GroupView view = swap->peek(g - resident_groups);
    const std::size_t n = std::min(count, group_lo[g] + step_groups[g].block - flat);
    device->copy(out, view.master + (flat - group_lo[g]), n * sizeof(float));
    flat += n, out += n, count -= n;
  }
}

}  // namespace zero::engine

namespace zero::engine {
namespace {

constexpr std::size_t kDirectAlign = 4096;  // the strictest direct-I/O alignment

std::size_t align_direct(std::size_t bytes) {
  return (bytes + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
}

}  // namespace

// A swapped group's region: its masters and its moments, each aligned for direct I/O.
std::size_t Engine::Impl::swap_region_bytes(std::size_t elements) const {
  if (elements == 0) return 0;
  const std::size_t state_size = dtype_size(config.optimizer_state_dtype);
  return align_direct(elements * 4) +
         static_cast<std::size_t>(config.optimizer.state_buffers()) *
             align_direct(elements * state_size);
}

std::size_t Engine::Impl::swap_buffer_bytes() const {
  std::size_t largest = 0;
  for (std::size_t g = resident_groups; g < step_groups.size(); ++g) {
    largest = std::max(largest, swap_region_bytes(step_groups[g].block));
  }
  const auto count = static_cast<std::size_t>(config.zero.offload_optimizer.buffer_count);
  const std::size_t bytes = count * (largest + kDirectAlign);
  // Refused here, before any memory is taken, with what to set.
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  const std::size_t memory = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) *
                                                         static_cast<std::size_t>(page)
                                                   : 0;
  if (memory != 0 && bytes > memory / 2) {
    const std::size_t per_element = swap_region_bytes(1 << 20) >> 20;
    throw make_error(
        ErrorCategory::config,
        "offload_optimizer: {} buffers of the largest step group's optimizer state ({} each) "
        "need {} of pinned memory, more than half of this host's {}; lower "
        "zero_optimization.sub_group_size (now {} elements; {} would make them about {} in all) "
        "or offload_optimizer.buffer_count",
        count, format_bytes(largest), format_bytes(bytes), format_bytes(memory),
        config.zero.sub_group_size, memory / 8 / count / std::max<std::size_t>(per_element, 1),
        format_bytes(memory / 8));
  }
  return bytes;
}

void Engine::Impl::open_swap_io() {
  if (aio) return;
  // A job id every rank shares: rank 0's process id and clock.
  auto* scratch = reinterpret_cast<std::int64_t*>(scalars) + 8;
  scratch[0] = rank == 0 ? (static_cast<std::int64_t>(getpid()) << 32) ^
                               static_cast<std::int64_t>(std::time(nullptr))
                         : 0;
  comm->broadcast(scratch, 1, DType::i64, 0).wait();
  const std::string job = fmt::format("{:x}", static_cast<std::uint64_t>(scratch[0]));

  offload::AioOptions aio_options;
  aio_options.block_size = static_cast<std::size_t>(config.aio.block_size);
  aio_options.queue_depth = static_cast<int>(config.aio.queue_depth);
  aio_options.intra_op_parallelism = static_cast<int>(config.aio.intra_op_parallelism);
  aio_options.inject = options.aio_inject;
  aio = offload::AsyncIO::create(aio_options);
  // One directory per rank holds both swap files; the optimizer's nvme_path wins when both
  // are set.
  const std::string& path = nvme ? config.zero.offload_optimizer.nvme_path
                                 : config.zero.offload_param.nvme_path;
  swap_dir = std::make_unique<offload::SwapDirectory>(path, job, rank);
}

void Engine::Impl::set_up_swap() {
  open_swap_io();
  OptimizerSwapOptions swap_options;
  std::size_t capacity = 0;
  for (std::size_t g = resident_groups; g < step_groups.size(); ++g) {
    swap_options.group_elements.push_back(step_groups[g].block);
    capacity += swap_region_bytes(step_groups[g].block);
  }
  swap_options.state_buffers = config.optimizer.state_buffers();
  swap_options.state_dtype = config.optimizer_state_dtype;
  swap_options.buffer_count = static_cast<std::size_t>(config.zero.offload_optimizer.buffer_count);
  swap_options.pipeline_read = config.zero.offload_optimizer.pipeline_read;
  swap_options.pipeline_write = config.zero.offload_optimizer.pipeline_write;
  nvme_arena = std::make_unique<Arena>(nullptr, Tier::nvme, std::max<std::size_t>(capacity, 1),
                                       "optimizer swap file");
  swap = std::make_unique<OptimizerSwap>(std::move(swap_options), *aio, *swap_dir,
                                         *offload_arena, *nvme_arena);
  log::info("engine: optimizer state of {} step groups swapped to {} ({}), {} kept in memory",
            swap->groups(), swap->path(), format_bytes(capacity), resident_groups);
}

bool Engine::Impl::swapped_param(std::size_t param) const {
  return param_nvme && params[param].compute_flat != kNone &&
         params[param].compute_flat >= compute_resident_end;
}

std::size_t Engine::Impl::param_region_bytes(std::size_t param) const {
  return align_direct(shard_shape(registry.param(param).numel, world).shard * dtype_size(compute));
}

void Engine::Impl::set_up_param_swap() {
  open_swap_io();
  param_region.assign(params.size(), kNone);
  std::size_t capacity = 0;
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (swapped_param(p)) capacity += param_region_bytes(p);
  }
  param_nvme_arena = std::make_unique<Arena>(nullptr, Tier::nvme,
                                             std::max<std::size_t>(capacity, 1),
                                             "parameter swap file");
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (!swapped_param(p) || param_region_bytes(p) == 0) continue;
    const std::size_t shard = shard_shape(registry.param(p).numel, world).shard;
    param_region[p] =
        param_nvme_arena->allocate(MemoryKind::param, shard * dtype_size(compute), kDirectAlign)
            .offset;
  }
  param_file = swap_dir->create("params.swap", param_nvme_arena->capacity(),
                                "zero_optimization.offload_param.nvme_path");
  std::size_t largest = 0;
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (params[p].compute_flat != kNone) largest = std::max(largest, param_region_bytes(p));
  }
  for (void*& bounce : param_bounce) {
    bounce = param_arena->allocate(MemoryKind::buffer, std::max<std::size_t>(largest, 1),
                                   kDirectAlign)
                 .ptr;
  }
  const auto count = static_cast<std::size_t>(config.zero.offload_param.buffer_count);
  for (std::size_t b = 0; b < count; ++b) {
    read_buffers.push_back(param_arena
                               ->allocate(MemoryKind::buffer, std::max<std::size_t>(largest, 1),
                                          kDirectAlign)
                               .ptr);
  }
  read_busy.assign(count, false);
  log::info("engine: {} of compute shards swapped to {}, {} elements kept in memory",
            format_bytes(capacity), param_file->path(), compute_resident_end);
}

void Engine::Impl::fetch_shard(std::size_t param, void* place) {
  const std::size_t bytes = shard_shape(registry.param(param).numel, world).shard *
                            dtype_size(compute);
  if (bytes == 0) return;
  if (!swapped_param(param)) {
    device->copy(place, shard_source(param), bytes);
    return;
  }
  finish_reads(kNone);  // param_bounce[0] and the file are ours alone meanwhile
  const std::size_t region = param_region_bytes(param);
  param_file->wait(*aio, param_file->read(*aio, param_region[param], param_bounce[0], region));
  device->copy(place, param_bounce[0], bytes);
}

void Engine::Impl::store_shard(std::size_t param, int which) {
  const std::size_t region = param_region_bytes(param);
  if (region == 0) return;
  param_file->wait(*aio,
                   param_file->write(*aio, param_region[param], param_bounce[which], region));
}

char* Engine::Impl::assemble(std::size_t param) {
  if (assembling != param) {
    // The buffer's previous shard must be on disk before it is reused.
    if (writing[assembly]) param_file->wait(*aio, *std::exchange(writing[assembly], {}));
    std::memset(param_bounce[assembly], 0, param_region_bytes(param));
    assembling = param;
  }
  return static_cast<char*>(param_bounce[assembly]);
}

void Engine::Impl::write_assembled() {
  const std::size_t region = param_region_bytes(assembling);
  if (region != 0) {
    writing[assembly] =
        param_file->write(*aio, param_region[assembling], param_bounce[assembly], region);
  }
  assembling = kNone;
  assembly = assembly == 1 ? 2 : 1;
}

void Engine::Impl::finish_param_writes() {
  for (auto& ticket : writing) {
    if (ticket) param_file->wait(*aio, *std::exchange(ticket, {}));
  }
}

void Engine::Impl::start_read(std::size_t param) {
  auto free = std::find(read_busy.begin(), read_busy.end(), false);
  while (free == read_busy.end()) {
    finish_reads(reads.front().param);  // the oldest read makes room
    free = std::find(read_busy.begin(), read_busy.end(), false);
  }
  const auto buffer = static_cast<std::size_t>(free - read_busy.begin());
  read_busy[buffer] = true;
  const offload::Ticket ticket = param_file->read(*aio, param_region[param], read_buffers[buffer],
                                                  param_region_bytes(param));
  reads.push_back({param, ticket, buffer});
  params[param].reading = true;
}

void Engine::Impl::finish_reads(std::size_t param) {
  while (!reads.empty()) {
    const PendingRead read = reads.front();
    reads.pop_front();
    ParamState& state = params[read.param];
    Timer timer;
    param_file->wait(*aio, read.ticket);
    timers.gather_wait += timer.seconds();
    const std::size_t shard = shard_shape(registry.param(read.param).numel, world).shard;
    const std::size_t bytes = shard * dtype_size(compute);
    char* place = static_cast<char*>(state.full) + static_cast<std::size_t>(rank) * bytes;
    Stream& stream = device->default_stream();
    device->copy_async(place, read_buffers[read.buffer], bytes, stream);
    state.gathering = comm->all_gather(place, state.full, shard, compute, &stream);
    state.reading = false;
    state.in_flight = true;
    gathers_in_flight += 1;
    read_busy[read.buffer] = false;
    if (read.param == param) return;
  }
}

}  // namespace zero::engine
