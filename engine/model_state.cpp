// Where the model state lives: the layout of each rank's owned flat buffers and the arenas
// (both planned by memory_plan.cpp), the blocks carved from the arenas, and the initial
// values. What each stage holds per rank is docs/design.md's table; README "Memory" lists the
// buffers beside it.
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "engine/engine_impl.h"

namespace zero::engine {

std::size_t Engine::Impl::owned_valid(std::size_t param) const {
  return params[param].shape.valid(stage == 0 ? 0 : rank);
}

Device& Engine::Impl::state_device() { return offload ? host_device() : *device; }

Device& Engine::Impl::host_device() { return host ? *host : *device; }

float* Engine::Impl::state_scalars() { return offload && host ? host_scalars : scalars; }

float* Engine::Impl::master_of(std::size_t param) {
  if (master_is_param()) return static_cast<float*>(params[param].full);
  return master + params[param].flat;
}

void* Engine::Impl::shard_source(std::size_t param) {
  const ParamState& state = params[param];
  if (swapped_param(param)) return nullptr;  // on NVMe: copy_shard reads it
  if (state.compute_flat != kNone) {
    return static_cast<char*>(compute_shard) + state.compute_flat * dtype_size(compute);
  }
  return master + state.flat;  // fp32 trainable: the master is the compute shard
}

void Engine::Impl::lay_out() {
  layout = plan_layout(registry, config, world);
  memory_plan = plan_memory(registry, config, layout, device->type() != DeviceType::cpu);
  for (std::size_t p = 0; p < params.size(); ++p) {
    const ParamPlacement& place = layout.params[p];
    params[p].shape = place.shape;
    params[p].flat = place.flat;
    params[p].global_first = place.global_first;
    params[p].compute_flat = place.compute_flat;
    params[p].persistent = place.persistent;
  }
  reducer = std::make_unique<GradReducer>(context());
  fetcher = std::make_unique<ParamFetcher>(context());
}

void Engine::Impl::allocate() {
  const std::size_t csize = dtype_size(compute);
  const auto& specs = registry.params();
  const bool full_params = stage <= 2;
  const bool full_grads_kept = stage <= 1;
  const bool has_master = mixed || stage >= 1;
  const bool has_grad_flat = stage >= 1 || accum != compute;
  const int state_buffers = config.optimizer.state_buffers();
  const std::size_t state_size = dtype_size(config.optimizer_state_dtype);

  // Every arena is sized by the plan zero-mem predicts with (lay_out made it); the blocks taken
  // below are the ones it counts.
  const MemoryPlan& plan = memory_plan;
  if (nvme) check_swap_buffers();
  if (plan.offload.made()) {
    offload_arena = std::make_unique<Arena>(device.get(), plan.offload.tier,
                                            plan.offload.capacity, plan.offload.name);
  }
  state_arena = std::make_unique<Arena>(device.get(), Tier::device, plan.state.capacity,
                                        plan.state.name);

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
  // Stages 0-1: the replicated gradients, the GradReducer's for the run (taken here, in the
  // plan's order, beside the parameters).
  std::vector<void*> full_grads(specs.size(), nullptr);
  for (std::size_t p = 0; p < specs.size(); ++p) {
    if (full_params) params[p].full = take(MemoryKind::param, specs[p].numel * csize);
    if (full_grads_kept && specs[p].trainable) {
      full_grads[p] = take(MemoryKind::grad, specs[p].numel * csize);
    }
  }
  if (has_master) {
    master = static_cast<float*>(take_owned(MemoryKind::master, resident_end * 4));
    if (master != nullptr) owned_device.fill(master, DType::f32, resident_end, 0.0f, owned_stream);
  }
  if (has_grad_flat) {
    grad_flat = take_owned(MemoryKind::grad, owned.total * dtype_size(accum));
    owned_device.fill(grad_flat, accum, owned.total, 0.0f, owned_stream);
  }
  for (int s = 0; s < state_buffers; ++s) {
    moments[s] = take_owned(MemoryKind::moment, resident_end * state_size);
    if (moments[s] != nullptr) {
      owned_device.fill(moments[s], config.optimizer_state_dtype, resident_end, 0.0f,
                        owned_stream);
    }
  }
  void* reduce_staging = take_owned(MemoryKind::buffer, plan.reduce_staging_bytes);
  if (offload) param_staging = take_owned(MemoryKind::buffer, plan.param_staging_bytes);
  owned_stream.synchronize();
  if (nvme) set_up_swap();
  if (stage == 3 && param_offload) {
    param_arena = std::make_unique<Arena>(device.get(), plan.param.tier, plan.param.capacity,
                                          plan.param.name);
    compute_shard = take_from(*param_arena, MemoryKind::param, compute_resident_end * csize);
    if (compute_shard != nullptr) {
      host_device().fill(compute_shard, compute, compute_resident_end, 0.0f,
                         host_device().default_stream());
      host_device().default_stream().synchronize();
    }
    if (!offload) {
      param_staging = take_from(*param_arena, MemoryKind::buffer, plan.param_staging_bytes);
    }
    if (param_nvme) {
      open_swap_io();
      param_swap =
          std::make_unique<ParamSwap>(context(), memory_plan, *aio, *swap_dir, *param_arena);
    }
  } else if (stage == 3) {
    compute_shard = take(MemoryKind::param, compute_shards.total * csize);
    device->fill(compute_shard, compute, compute_shards.total, 0.0f, stream);
  }
  std::vector<void*> bucket_buffers;
  for (std::size_t i = 0; i < plan.bucket_count; ++i) {
    bucket_buffers.push_back(take(MemoryKind::buffer, plan.bucket_bytes));
  }
  gather_buffer = take(MemoryKind::buffer, plan.gather_bytes);
  std::unique_ptr<Arena> grad_arena;
  if (plan.grad.made()) {
    grad_arena = std::make_unique<Arena>(device.get(), Tier::device, plan.grad.capacity,
                                         plan.grad.name);
  }
  // Reduced blocks go into the owned gradient shard; with optimizer offload it is in pinned
  // memory, where the CPU adds them in after they come down.
  GradReducer::Target target;
  target.grad_flat = grad_flat;
  target.accum = accum;
  target.adder = offload ? &state_device() : device.get();
  target.staging = offload ? reduce_staging : nullptr;
  reducer->attach(std::move(full_grads), std::move(bucket_buffers), std::move(grad_arena), target);
  if (plan.gather.made()) {
    fetcher->attach(std::make_unique<Arena>(device.get(), Tier::device, plan.gather.capacity,
                                            plan.gather.name),
                    *this);
  }

  optim::Formats formats;
  formats.grad = has_grad_flat ? accum : compute;
  formats.state = config.optimizer_state_dtype;
  formats.param_out = mixed ? compute : DType::bf16;
  formats.copy_out = mixed;  // fp32: the master is the parameter, nothing is copied out
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
