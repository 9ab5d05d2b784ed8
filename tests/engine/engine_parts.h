// The engine's parts put together as Engine::Impl puts them, without the Engine: a config
// from JSON, a small registry, the layout and plan, the CPU device in a chosen mode and the
// local communicator (one rank), then the ModelState, GradReducer, ParamFetcher, Stepper and
// CheckpointState made and attached in the engine's order. Each part's own test file drives
// the part directly through its interface, against its contract.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/half.h"
#include "comm/backends.h"
#include "config/config.h"
#include "device/device.h"
#include "engine/collectives/agreement.h"
#include "engine/engine_context.h"
#include "engine/fetching/param_fetcher.h"
#include "engine/gradients/grad_reducer.h"
#include "engine/plan/memory_plan.h"
#include "engine/plan/registry.h"
#include "engine/state/checkpoint_state.h"
#include "engine/state/model_state.h"
#include "engine/state/value_source.h"
#include "engine/stepping/stepper.h"

namespace zero::engine::testing {

// Two modules: "a" uses p0 (37 elements) and p2 (a 5 x 3 matrix, tied: used by both), "b"
// uses p1 (101 elements) and p2; p3 (9 elements, in "b") is frozen.
inline void two_modules(Registry& r) {
  const std::size_t a = r.add_module("a");
  const std::size_t b = r.add_module("b");
  r.add_param("p0", {37}, true, 0, {a});
  r.add_param("p1", {101}, true, 0, {b});
  r.add_param("p2", {5, 3}, true, 0, {a, b});
  r.add_param("p3", {9}, false, 0, {b});
}

// Every element a function of its parameter and place: p * 100 + i / 8.
struct ArithmeticValues final : ValueSource {
  void values(std::size_t p, std::uint64_t first, std::size_t count, float* out) override {
    for (std::size_t i = 0; i < count; ++i) {
      out[i] = static_cast<float>(p) * 100.0f + static_cast<float>(first + i) / 8.0f;
    }
  }
};

class EngineParts {
 public:
  EngineParts(const std::string& config_json,
              const std::function<void(Registry&)>& model = two_modules,
              CpuDeviceMode mode = CpuDeviceMode::async)
      : device(create_cpu_device(mode)) {
    comm::CommOptions options;
    options.device = device.get();
    options.timeout = std::chrono::seconds(30);
    comm = comm::make_local_communicator(options);
    config = config::read_config_text(config_json, {});
    model(registry);
    registry.freeze();
    layout = plan_layout(registry, config, 1);
    plan = plan_memory(registry, config, layout, device->offload_beside());
    scalars = static_cast<float*>(device->reserve(Tier::device, kScratchBytes));
    state = std::make_unique<ModelState>(context(), plan, faults_);
    reducer = std::make_unique<GradReducer>(context());
    fetcher = std::make_unique<ParamFetcher>(context());
    stepper = std::make_unique<Stepper>(context(), *state, *reducer, *fetcher, scalars, 7);
    agreement = Agreement(*comm, *device);
    checkpoints = std::make_unique<CheckpointState>(
        context(), CheckpointState::Parts{*state, *stepper, *fetcher, agreement}, faults_);
    ModelState::PartsMemory parts = state->allocate("part-test");
    reducer->attach(std::move(parts.full_grads), std::move(parts.bucket_buffers),
                    std::move(parts.grad_arena), parts.reduce_target);
    if (parts.gather_arena) fetcher->attach(std::move(parts.gather_arena), *state);
    stepper->create_optimizer(1);
  }
  ~EngineParts() {
    checkpoints.reset();
    stepper.reset();
    reducer.reset();
    fetcher.reset();
    state.reset();
    device->unreserve(Tier::device, scalars, kScratchBytes);
  }
  EngineParts(const EngineParts&) = delete;
  EngineParts& operator=(const EngineParts&) = delete;

  EngineContext context() { return {config, registry, layout, *device, *comm}; }

  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  config::Config config;
  Registry registry;
  Layout layout;
  MemoryPlan plan;
  float* scalars = nullptr;
  std::unique_ptr<ModelState> state;
  std::unique_ptr<GradReducer> reducer;
  std::unique_ptr<ParamFetcher> fetcher;
  std::unique_ptr<Stepper> stepper;
  Agreement agreement;
  std::unique_ptr<CheckpointState> checkpoints;

 private:
  FaultHooks faults_;
};

// Writes `g` (fp32) into trainable parameter p's place in the owned gradient shard, in the
// accumulation dtype (fp32, fp16 or bf16, rounded to nearest), through the state's device. As a
// reduction would, after the zeros a step left pending (GradReducer::zero_owned) are written.
inline void write_owned_grad(EngineParts& parts, std::size_t p, const std::vector<float>& g) {
  const DType accum = parts.layout.modes.accum;
  const std::size_t owned =
      parts.layout.modes.grad_nvme ? parts.layout.resident_end : parts.layout.owned.total;
  parts.reducer->settle_owned(owned, parts.state->state_device().default_stream());
  std::vector<std::uint16_t> halves(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    halves[i] = accum == DType::bf16 ? float_to_bf16(g[i]) : float_to_fp16(g[i]);
  }
  const std::size_t size = dtype_size(accum);
  parts.state->state_device().copy(
      static_cast<char*>(parts.state->grad_flat()) + parts.layout.params[p].flat * size,
      accum == DType::f32 ? static_cast<const void*>(g.data()) : halves.data(), g.size() * size);
}

// Parameter p's fp32 master values, wherever the parts keep them, copied out through the device.
inline std::vector<float> master_of(EngineParts& parts, std::size_t p) {
  const std::size_t n = parts.registry.param(p).numel;
  std::vector<float> out(n);
  auto* on_device = static_cast<float*>(parts.device->reserve(Tier::device, n * 4));
  parts.state->copy_master(parts.layout.params[p].flat, n, on_device);
  parts.device->copy(out.data(), on_device, n * 4);
  parts.device->unreserve(Tier::device, on_device, n * 4);
  return out;
}

}  // namespace zero::engine::testing
