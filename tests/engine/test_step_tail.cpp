// super_offload's tail (docs/offload.md, "The step's tail"): where nothing can undo a
// speculated step (no clipping, no overflow check) and the boundary's sums came from the
// device, step() returns with the groups the worker has not stepped yet, and the next forward's
// gather of each shard waits for its group's update. Here the worker is held (FaultHooks::
// speculated_step) until step() returns and slowed after, so that step() leaves every group
// to it, and a step() that waited for them times the hook out; on the guarded CPU device (a
// GPU's streams and events, device memory the engine may not touch from the host); a model whose
// gradients are a function of the weights its forward read must then train with exactly the
// bits of the same model without offload: a forward that read a shard before its update landed
// would change every step after it.
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

std::string tail_config(bool offload) {
  return fmt::format(
      R"({{
    "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
    "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-2, "weight_decay": 0.01}}}},
    "zero_optimization": {{"stage": 3, "sub_group_size": {0}, "reduce_bucket_size": {0},
      "stage3_param_persistence_threshold": 0{1}}}}})",
      kElements,
      offload ? R"(, "offload_optimizer": {"device": "cpu", "super_offload": true})" : "");
}

struct TailRun {
  std::vector<std::vector<float>> forward_reads;  // per step and module: what forward read
  std::vector<std::vector<float>> finals;         // per module: read_param after the last step
  int held = 0;            // speculated groups held until their step() returned
  bool timed_out = false;  // a step() waited for its groups (the hook gave up)
};

TailRun run(bool offload) {
  auto made = create_cpu_device(offload ? CpuDeviceMode::guarded : CpuDeviceMode::sync);
  Device& device = *made;
  comm::CommOptions comm_options;
  comm_options.device = made.get();
  EngineOptions options;
  options.optimizer_threads = 1;
  Engine engine(config::read_config_text(tail_config(offload), {}), std::move(made),
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
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::vector<float>> read(kModules, std::vector<float>(kElements));
    for (int m = 0; m < kModules; ++m) {
      engine.pre_forward(m, stream.get());
      stream->synchronize();
      device.copy(read[m].data(), engine.param_data(params[m]), kElements * sizeof(float));
      engine.post_forward(m, stream.get());
      out.forward_reads.push_back(read[m]);
    }
    returned = false;  // the boundary's groups are held from its first backward hook
    for (int m = kModules - 1; m >= 0; --m) {
      engine.pre_backward(m, stream.get());
      // A gradient of what forward read: a stale read changes it.
      for (std::int64_t i = 0; i < kElements; ++i) {
        grad[i] = 0.5f * read[m][i] + 0.01f * static_cast<float>((i + m + step) % 7 - 3);
      }
      stream->synchronize();
      device.copy(engine.grad_buffer(params[m]), grad.data(), kElements * sizeof(float));
      engine.post_backward(m, stream.get());
    }
    engine.step();
    returned = true;
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
  const TailRun plain = run(/*offload=*/false);
  const TailRun tail = run(/*offload=*/true);
  // Every group of every step was held until its step() returned, and no step() waited.
  CHECK(tail.held == kSteps * kModules);
  CHECK_FALSE(tail.timed_out);
  REQUIRE(plain.forward_reads.size() == tail.forward_reads.size());
  for (std::size_t k = 0; k < plain.forward_reads.size(); ++k) {
    INFO("step " << k / kModules << ", module " << k % kModules << "'s forward");
    CHECK(std::memcmp(plain.forward_reads[k].data(), tail.forward_reads[k].data(),
                      kElements * sizeof(float)) == 0);
  }
  for (int m = 0; m < kModules; ++m) {
    INFO("module " << m << " after the last step");
    CHECK(std::memcmp(plain.finals[m].data(), tail.finals[m].data(), kElements * sizeof(float)) ==
          0);
  }
}

}  // namespace zero::engine
