// super_offload's tail (docs/offload.md, "The step's tail"): where nothing can undo a
// speculated step (no clipping, no overflow check), at stage 3 beside a GPU, step() returns
// with the groups the worker has not stepped yet, and the next forward's gather of each shard
// waits for its group's update. Here the worker is held (FaultHooks::speculated_step) until
// step() returns and slowed after, so that step() leaves every group to it, and a step() that
// waited for them times the hook out; on the guarded CPU device (a GPU's streams and events,
// device memory the engine may not touch from the host) a model whose gradients are a
// function of the weights its forward read must then train with exactly the bits of the same
// model without offload: a forward that read a shard before its update landed would change
// every step after it.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/backends.h"
#include "config/config.h"
#include "device/device.h"
#include "engine/engine.h"
#include "engine/fault_hooks.h"

namespace zero::engine {
namespace {

constexpr int kModules = 5;
constexpr std::int64_t kElements = 999;  // per module, a step group each
constexpr int kSteps = 4;

std::string tail_config(bool offload, int accumulation) {
  return fmt::format(
      R"({{
    "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": {2},
    "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-2, "weight_decay": 0.01}}}},
    "zero_optimization": {{"stage": 3, "sub_group_size": {0}, "reduce_bucket_size": {0},
      "stage3_param_persistence_threshold": 0{1}}}}})",
      kElements,
      offload ? R"(, "offload_optimizer": {"device": "cpu", "super_offload": true})" : "",
      accumulation);
}

struct TailRun {
  std::vector<std::vector<float>> forward_reads;  // per micro-step and module: forward's reads
  std::vector<std::vector<float>> finals;         // per module: read_param after the last step
  std::vector<double> norms;  // per optimizer step: the gradient norm it reported
  int held = 0;               // speculated groups held until their step() returned
  bool timed_out = false;     // a step() waited for its groups (the hook gave up)
};

// kSteps optimizer steps of `accumulation` micro-steps each.
TailRun run(bool offload, int accumulation) {
  auto made = create_cpu_device(offload ? CpuDeviceMode::guarded : CpuDeviceMode::sync);
  Device& device = *made;
  comm::CommOptions comm_options;
  comm_options.device = made.get();
  EngineOptions options;
  options.optimizer_threads = 1;
  Engine engine(config::read_config_text(tail_config(offload, accumulation), {}), std::move(made),
                comm::make_local_communicator(comm_options), options);
  std::atomic<bool> returned{false};  // the boundary's step() returned
  std::atomic<int> held{0};
  std::atomic<bool> timed_out{false};
  if (offload) {
    FaultHooks hooks;
    hooks.speculated_step = [&](std::size_t) {
      held.fetch_add(1);
      for (int ms = 0; ms < 10000 && !returned.load(); ++ms) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!returned.load()) timed_out = true;
      // The update lands well after the next forward has started.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    };
    set_fault_hooks(engine, std::move(hooks));
  }
  std::vector<std::size_t> params;
  for (int m = 0; m < kModules; ++m) {
    const std::size_t module = engine.add_module(fmt::format("block{}", m));
    params.push_back(
        engine.add_param(fmt::format("block{}.weight", m), {kElements}, true, 0, {module}));
  }
  engine.init();
  auto stream = device.create_stream();
  TailRun out;
  std::vector<float> grad(kElements);
  for (int micro = 0; micro < kSteps * accumulation; ++micro) {
    std::vector<std::vector<float>> read(kModules, std::vector<float>(kElements));
    for (int m = 0; m < kModules; ++m) {
      engine.pre_forward(m, stream.get());
      stream->synchronize();
      device.copy(read[m].data(), engine.param_data(params[m]), kElements * sizeof(float));
      engine.post_forward(m, stream.get());
      out.forward_reads.push_back(read[m]);
    }
    returned = false;  // a boundary's groups are held from its first backward hook
    for (int m = kModules - 1; m >= 0; --m) {
      engine.pre_backward(m, stream.get());
      // A gradient of what forward read: a stale read changes it.
      for (std::int64_t i = 0; i < kElements; ++i) {
        grad[i] = 0.5f * read[m][i] + 0.01f * static_cast<float>((i + m + micro) % 7 - 3);
      }
      stream->synchronize();
      device.copy(engine.grad_buffer(params[m]), grad.data(), kElements * sizeof(float));
      engine.post_backward(m, stream.get());
    }
    const StepStats stats = engine.step();
    returned = true;
    if (stats.stepped) out.norms.push_back(stats.grad_norm);
  }
  // The last step's groups too: read_param waits for them.
  for (std::size_t p : params) out.finals.push_back(engine.read_param(p));
  out.held = held.load();
  out.timed_out = timed_out.load();
  return out;
}

}  // namespace

TEST_CASE(
    "super_offload without a backup leaves a step's last groups to its worker, and the next "
    "forward reads each shard after its update: the bits of the run without offload",
    "[engine][offload]") {
  // At accumulation 1 the device takes the norm's sums as the blocks come down; at 2 the host
  // adds the second micro-step's, and the boundary takes the sums the worker has not.
  const int accumulation = GENERATE(1, 2);
  INFO("gradient accumulation " << accumulation);
  const TailRun plain = run(/*offload=*/false, accumulation);
  const TailRun tail = run(/*offload=*/true, accumulation);
  // Every group of every step was held until its step() returned, and no step() waited.
  CHECK(tail.held == kSteps * kModules);
  CHECK_FALSE(tail.timed_out);
  REQUIRE(plain.forward_reads.size() == tail.forward_reads.size());
  for (std::size_t k = 0; k < plain.forward_reads.size(); ++k) {
    INFO("micro-step " << k / kModules << ", module " << k % kModules << "'s forward");
    CHECK(std::memcmp(plain.forward_reads[k].data(), tail.forward_reads[k].data(),
                      kElements * sizeof(float)) == 0);
  }
  // The norm the step reports, its sums taken by the device, the worker and the boundary (at
  // accumulation 2, those the worker had not taken when step() returned): the same sum in
  // another order than the run without offload's.
  REQUIRE(tail.norms.size() == kSteps);
  for (int k = 0; k < kSteps; ++k) {
    INFO("optimizer step " << k);
    CHECK(tail.norms[k] == Approx(plain.norms[k]).epsilon(1e-6));
  }
  for (int m = 0; m < kModules; ++m) {
    INFO("module " << m << " after the last step");
    CHECK(std::memcmp(plain.finals[m].data(), tail.finals[m].data(), kElements * sizeof(float)) ==
          0);
  }
}

}  // namespace zero::engine
