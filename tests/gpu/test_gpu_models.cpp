// The CUDA models against the CPU models, whole ([gpu]; and under the CPU emulation of CUDA, in
// every build: tests/gpu/cuda_side.h): the same small GPT-2, Llama (grouped
// key/value heads) and Qwen2-shaped model (q/k/v biases, tied head), registered with the same
// seed, trained through the engine in bf16 on the CPU (the CPU layers compute in fp32 from bf16
// compute copies) and on GPU 0 (the CUDA layers, bf16 with fp32 accumulation), one rank, AdamW.
//
// What is compared, and why these tolerances:
//   - the first forward's loss, to 1e-2 relative: the weights are the same bf16 values; the GPU
//     rounds every activation to bf16 (2^-8 relative), a few per block, so the loss moves by a
//     few parts in a thousand at most;
//   - the global gradient norm of the first step (zero_step_stats.grad_norm), to 3e-2 relative:
//     the gradients carry the activations' rounding once more on the way back;
//   - the direction of every parameter's first AdamW update: Adam's first step is -lr g / (|g| +
//     eps) per element, so its sign is the gradient's. At least 90% of each tensor's elements
//     (with an update of at least lr / 2 on the CPU) must move the same way on both: a wrong
//     index or a missing term scrambles a tensor's signs to about 50%;
//   - five more steps' losses, to 2e-2 relative;
//   - evaluation logits after training, to 5e-2 of the largest logit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/gpt/cuda_model.h"
#include "models/gpt/model.h"
#include "models/llama/cuda_model.h"
#include "models/llama/model.h"
#include "tests/gpu/cuda_side.h"
#include "zero/zero.h"

namespace {

#define REQUIRE_OK(call) REQUIRE((call) == ZERO_OK)

constexpr int kB = 2, kT = 24, kSteps = 6;
constexpr double kLr = 1e-3;

struct Run {
  std::vector<float> losses;
  double first_grad_norm = 0;
  std::vector<std::vector<float>> before, after_first;  // every parameter, fp32 masters
  std::vector<std::string> names;                       // every parameter's name
  std::vector<float> logits;
};

struct Model {
  const char* name;
  bool llama;
  zero::gpt::GptConfig gpt;
  zero::llama::LlamaConfig llama_config;
};

std::vector<Model> models() {
  zero::llama::LlamaConfig llama = zero::llama::LlamaConfig::by_name("llama-tiny");
  llama.layers = 2, llama.heads = 4, llama.kv_heads = 2, llama.channels = 64;
  llama.intermediate = 96, llama.max_seq = 32, llama.vocab = 97;
  zero::llama::LlamaConfig qwen = llama;
  qwen.family = "qwen2", qwen.kv_heads = 1, qwen.qkv_bias = true, qwen.tied = true;
  qwen.norm_eps = 1e-6, qwen.rope_theta = 1e6;
  return {{"gpt2", false, zero::gpt::GptConfig{2, 4, 64, 32, 97}, {}},
          {"llama", true, {}, llama},
          {"qwen2", true, {}, qwen}};
}

Run train(const Model& m, bool gpu) {
  const std::string config = R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.0}},
      "zero_optimization": {"stage": 0}})";
  zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
  options.device = ZERO_DEVICE_CPU;
  zero_test::CudaSide side;
  if (gpu) side.fill(options);
  zero_engine* engine = nullptr;
  REQUIRE_OK(zero_create(config.c_str(), &options, &engine));
  Run run;
  {
    std::unique_ptr<zero::models::CausalLm> model;
    const zero::models::ActivationOptions activations{};
    if (m.llama) {
      model = gpu ? zero::llama::make_cuda_llama(engine, m.llama_config, kB, kT, 5, activations)
                  : zero::llama::make_llama(engine, m.llama_config, kB, kT, 5);
    } else {
      model = gpu ? zero::gpt::make_cuda_gpt(engine, m.gpt, kB, kT, 5, activations)
                  : zero::gpt::make_gpt(engine, m.gpt, kB, kT, 5);
    }
    REQUIRE_OK(zero_init(engine));
    if (gpu) side.reach(engine, model->numels());
    const int vocab = m.llama ? m.llama_config.vocab : m.gpt.vocab;
    auto read_all = [&] {
      std::vector<std::vector<float>> values;
      for (std::size_t id = 0; id < model->numels().size(); ++id) {
        values.emplace_back(model->numels()[id]);
        REQUIRE_OK(zero_read_param(engine, static_cast<int>(id), values.back().data(),
                                   values.back().size()));
      }
      return values;
    };
    run.before = read_all();
    run.names = model->names();
    std::mt19937 rng(11);
    std::vector<std::int32_t> tokens(kB * kT), targets(kB * kT);
    for (int step = 0; step < kSteps; ++step) {
      for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % vocab);
      for (auto& t : targets) t = static_cast<std::int32_t>(rng() % vocab);
      targets[5] = -1;
      if (step == 0) {
        run.losses.push_back(model->forward(tokens.data(), targets.data()));
        model->backward();
        zero_step_stats stats{};
        REQUIRE_OK(zero_step(engine, &stats));
        run.first_grad_norm = stats.grad_norm;
        run.after_first = read_all();
        continue;
      }
      // Then as zero-train runs: the loss queued, the step given no stats, and the step before
      // read once this one's backward is queued; the phases timed by marks.
      model->mark(3);
      model->forward_queued(tokens.data(), targets.data());
      model->mark(4);
      model->backward();
      model->mark(5);
      CHECK(model->seconds_between(3, 4) >= 0.0);
      CHECK(model->seconds_between(4, 5) >= 0.0);
      CHECK(model->seconds_between(3, 5) >= model->seconds_between(4, 5));
      CHECK_THROWS_AS(model->seconds_between(3, 40), std::logic_error);  // never marked
      if (step >= 2) {
        run.losses.push_back(model->take_losses(1).at(0));
        zero_step_stats last{};
        REQUIRE_OK(zero_last_step_stats(engine, &last));
        CHECK(last.stepped == 1);
        CHECK(last.global_steps == step);
        CHECK(std::isfinite(last.grad_norm));
        CHECK(last.grad_norm > 0);
      }
      REQUIRE_OK(zero_step(engine, nullptr));
    }
    CHECK_THROWS_AS(model->take_losses(2), std::logic_error);  // one is queued
    CHECK_THROWS_AS(model->evaluate(tokens.data(), targets.data()), std::logic_error);
    run.losses.push_back(model->take_losses(1).at(0));
    for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % vocab);
    for (auto& t : targets) t = static_cast<std::int32_t>(rng() % vocab);
    model->evaluate(tokens.data(), targets.data());
    run.logits = model->logits();
  }
  REQUIRE_OK(zero_destroy(engine));
  return run;
}

}  // namespace

TEST_CASE("cuda models: GPT-2, Llama and Qwen2 train on the GPU as on the CPU, in bf16", "[gpu]") {
  for (const Model& m : models()) {
    INFO("model " << m.name);
    const Run cpu = train(m, false);
    const Run gpu = train(m, true);
    REQUIRE(cpu.losses.size() == gpu.losses.size());
    CHECK(gpu.losses[0] == Approx(cpu.losses[0]).epsilon(1e-2));
    CHECK(gpu.first_grad_norm == Approx(cpu.first_grad_norm).epsilon(3e-2));
    for (std::size_t s = 1; s < cpu.losses.size(); ++s) {
      INFO("step " << s);
      CHECK(gpu.losses[s] == Approx(cpu.losses[s]).epsilon(2e-2));
    }
    // The first update's direction, per tensor (both start from the same masters). Not the key
    // projection's bias: its gradient is zero in exact arithmetic (it adds q.b to every score of
    // a query, which the softmax cancels), so the sign of its first Adam update is rounding
    // noise on either device.
    REQUIRE(cpu.before.size() == gpu.before.size());
    for (std::size_t id = 0; id < cpu.before.size(); ++id) {
      INFO("parameter " << id << ", " << cpu.names[id]);
      REQUIRE(cpu.before[id] == gpu.before[id]);
      if (cpu.names[id].ends_with("k_proj.bias")) continue;
      std::size_t moved = 0, agree = 0;
      for (std::size_t i = 0; i < cpu.before[id].size(); ++i) {
        const double dc = static_cast<double>(cpu.after_first[id][i]) - cpu.before[id][i];
        const double dg = static_cast<double>(gpu.after_first[id][i]) - gpu.before[id][i];
        if (std::fabs(dc) < kLr / 2) continue;
        ++moved;
        if ((dc > 0) == (dg > 0)) ++agree;
      }
      if (moved > 0) CHECK(static_cast<double>(agree) / static_cast<double>(moved) >= 0.9);
    }
    REQUIRE(gpu.logits.size() == cpu.logits.size());
    double largest = 0, diff = 0;
    for (std::size_t i = 0; i < cpu.logits.size(); ++i) {
      largest = std::max(largest, std::fabs(static_cast<double>(cpu.logits[i])));
      diff = std::max(diff, std::fabs(static_cast<double>(gpu.logits[i]) - cpu.logits[i]));
    }
    CHECK(diff <= 5e-2 * largest);
    WARN(m.name << ": losses " << cpu.losses[0] << " (CPU) and " << gpu.losses[0]
                << " (GPU); gradient norms " << cpu.first_grad_norm << " and "
                << gpu.first_grad_norm << "; logits within " << diff << " of " << largest);
  }
}
