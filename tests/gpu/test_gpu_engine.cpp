// The engine on a CUDA device: created on GPU 0 with a world of one, it says its buffers live
// in that GPU's memory (what zero_data_location reports); and a caller's stream destroyed before
// the engine is never touched again (zero.h, "Teardown"; compute-sanitizer in gpu-check reports
// an API call on the destroyed handle).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "comm/create.h"
#include "config/config.h"
#include "device/device.h"
#include "engine/engine.h"

namespace zero {

namespace {

std::unique_ptr<engine::Engine> engine_on_gpu0(const std::string& text) {
  comm::CommOptions comm_options;
  comm_options.backend = comm::Backend::local;
  comm_options.timeout = std::chrono::seconds(60);
  comm::LaunchInfo launch;
  comm_options.launch = launch;
  DeviceOptions device_options;
  device_options.preference = DevicePreference::cuda;
  auto device = create_device(device_options);
  comm_options.device = device.get();
  auto comm = comm::create_communicator(comm_options);
  return std::make_unique<engine::Engine>(config::read_config_text(text, {}), std::move(device),
                                          std::move(comm), engine::EngineOptions{});
}

}  // namespace

TEST_CASE("engine on CUDA: its buffers live in GPU 0's memory", "[gpu][engine]") {
  auto engine = engine_on_gpu0(R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 0}})");
  CHECK(engine->device().type() == DeviceType::cuda);
  CHECK(engine->device().ordinal() == 0);
}

TEST_CASE("engine on CUDA: the caller's stream may be destroyed before the engine",
          "[gpu][engine]") {
  // Stage 3 with the optimizer and the parameters on the CPU: every part of the engine has
  // worked on the caller's stream by the time it is gone.
  auto engine = engine_on_gpu0(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
      "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3, "sub_group_size": 100,
      "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}})");
  const std::size_t group = engine->add_group("all", 0.0, 1.0);
  const std::size_t module = engine->add_module("layer");
  const std::vector<float> values(333, 0.5f);
  const std::size_t param =
      engine->add_param("weight", {333}, true, group, {module}, {values.data(), {}});
  engine->init();
  cudaStream_t native = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&native, cudaStreamNonBlocking) == cudaSuccess);
  Stream* stream = engine->caller_stream(native);
  for (int step = 0; step < 2; ++step) {
    engine->pre_forward(module, stream);
    engine->post_forward(module, stream);
    engine->pre_backward(module, stream);
    REQUIRE(cudaMemsetAsync(engine->grad_buffer(param), 0x3c, 333 * 2, native) == cudaSuccess);
    engine->post_backward(module, stream);
    CHECK(engine->step().stepped);
  }
  REQUIRE(cudaStreamSynchronize(native) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(native) == cudaSuccess);
  engine.reset();
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE(
    "engine on CUDA: super_offload unset is on where its plan fits, and a step given no stats "
    "leaves its verdict on the GPU until asked for",
    "[gpu][engine]") {
  const auto decided = [](const char* offload) {
    auto engine = engine_on_gpu0(std::string(R"({"train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": true}, "optimizer": {"type": "AdamW"},
        "zero_optimization": {"stage": 2, "offload_optimizer": )") +
                                 offload + "}}");
    const std::size_t module = engine->add_module("layer");
    engine->add_param("weight", {333}, true, 0, {module});
    engine->init();
    return *config::resolved_value(engine->config(),
                                   "zero_optimization.offload_optimizer.super_offload");
  };
  CHECK(decided(R"({"device": "cpu"})") == config::json(true));  // a few KB fit any host
  CHECK(decided(R"({"device": "cpu", "super_offload": false})") == config::json(false));

  auto engine = engine_on_gpu0(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
      "gradient_clipping": 1.0, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 0}})");
  const std::size_t module = engine->add_module("layer");
  const std::size_t param = engine->add_param("weight", {333}, true, 0, {module});
  engine->init();
  Stream* stream = engine->caller_stream(nullptr);
  engine->pre_forward(module, stream);
  engine->post_forward(module, stream);
  engine->pre_backward(module, stream);
  // bf16 0x3c3c is 0.0115 in every element.
  REQUIRE(cudaMemset(engine->grad_buffer(param), 0x3c, 333 * 2) == cudaSuccess);
  engine->post_backward(module, stream);
  const engine::StepStats queued = engine->step(/*verdict_now=*/false);
  CHECK(queued.stepped);
  CHECK(queued.verdict_pending);
  const engine::StepStats last = engine->last_step_stats();
  CHECK_FALSE(last.verdict_pending);
  CHECK_FALSE(last.skipped);
  CHECK(last.grad_norm == Approx(std::sqrt(333.0) * 0.0115).epsilon(0.01));
}

}  // namespace zero
