// Shared by the engine's multi-rank tests: a small model of six modules registered through the
// C++ Engine on a communicator over the whole job, and one micro-step of hooks over it.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/create.h"
#include "config/config.h"
#include "device/device.h"
#include "engine/engine.h"
#include "engine/fault_hooks.h"

namespace zero::testing {

// Six modules in a chain. p0 is tied (embedding and head), p7 is small enough to be persistent,
// p8 is frozen; sizes are odd so that shards are padded.
struct Model {
  std::vector<std::vector<std::size_t>> modules{{0, 7}, {1, 2}, {3}, {4, 8}, {5}, {6, 0}};
  std::vector<std::int64_t> sizes{1201, 3001, 17, 2500, 999, 4097, 2049, 9, 1500};
};

inline constexpr std::size_t kFrozen = 8;

// The six modules in registration order: the pass order of the tests' micro-steps.
inline const std::vector<std::size_t> kModuleOrder{0, 1, 2, 3, 4, 5};

// Every parameter's full fp32 value (collective: every rank calls it).
inline std::vector<std::vector<float>> param_values(engine::Engine& e) {
  std::vector<std::vector<float>> out;
  for (std::size_t p = 0; p < e.registry().param_count(); ++p) out.push_back(e.read_param(p));
  return out;
}

// An engine over the whole job (MPI) for a config, with the model registered and initialised
// (`before_init`, when given, runs just before init), on `device` (null: create_device's).
inline std::unique_ptr<engine::Engine> make_engine(
    const std::string& text, engine::EngineOptions options = {},
    const std::function<void(engine::Engine&)>& before_init = {},
    std::unique_ptr<Device> device = nullptr) {
  if (!device) device = create_device({});
  comm::CommOptions comm_options;
  comm_options.backend = comm::Backend::mpi;
  comm_options.timeout = std::chrono::seconds(120);
  comm_options.device = device.get();  // collectives reach the engine's device memory
  auto comm = comm::create_communicator(comm_options);
  config::ReadOptions read;
  read.world_size = comm->size();
  auto engine = std::make_unique<engine::Engine>(
      config::read_config_text(text, read), std::move(device), std::move(comm), std::move(options));
  Model model;
  for (std::size_t m = 0; m < model.modules.size(); ++m)
    engine->add_module("m" + std::to_string(m));
  for (std::size_t p = 0; p < model.sizes.size(); ++p) {
    std::vector<std::size_t> users;
    for (std::size_t m = 0; m < model.modules.size(); ++m) {
      for (std::size_t q : model.modules[m]) {
        if (q == p) users.push_back(m);
      }
    }
    engine::InitialValue initial;
    initial.initializer = [p](std::uint64_t offset, std::size_t count, float* out) {
      for (std::size_t i = 0; i < count; ++i) {
        out[i] = 0.5f * std::sin(0.001f * static_cast<float>(offset + i) + static_cast<float>(p));
      }
    };
    engine->add_param("p" + std::to_string(p), {model.sizes[p]}, p != kFrozen, 0, users, initial);
  }
  if (before_init) before_init(*engine);
  engine->init();
  return engine;
}

// One micro-step over `order` (module indices, forward order): forward reads every parameter,
// backward adds a gradient that depends on the parameter, the rank and the step (fp32 compute;
// in half precision the gradients are left zero); `then_step` false leaves out the step.
inline double micro_step(engine::Engine& e, const std::vector<std::size_t>& order, int step,
                         bool train = true, bool then_step = true) {
  Model model;
  double checksum = 0;
  for (std::size_t m : order) {
    e.pre_forward(m);
    for (std::size_t p : model.modules[m]) {
      const float* data = static_cast<const float*>(e.param_data(p));
      for (std::int64_t i = 0; i < model.sizes[p]; i += 97) checksum += data[i];
    }
    e.post_forward(m);
  }
  if (!train) return checksum;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    e.pre_backward(*it);
    for (std::size_t p : model.modules[*it]) {
      if (p == kFrozen || e.compute_dtype() != DType::f32) continue;
      const float* data = static_cast<const float*>(e.param_data(p));
      float* grad = static_cast<float*>(e.grad_buffer(p));
      for (std::int64_t i = 0; i < model.sizes[p]; ++i) {
        grad[i] += 0.3f * data[i] + 0.01f * static_cast<float>((i + step + e.rank()) % 7);
      }
    }
    e.post_backward(*it);
  }
  if (then_step) e.step();
  return checksum;
}

}  // namespace zero::testing
