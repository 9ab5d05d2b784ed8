// bf16.check_grad_overflow (DeepSpeed's default, true): a bf16 step whose gradients hold a NaN
// or an infinity on any one rank is skipped on every rank, the masters keeping every bit and
// the step counted; turned off, the step is taken and the NaN reaches the masters.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/half.h"
#include "engine_model.h"
#include "multirank.h"

namespace zero::testing {
namespace {

std::string bf16_config(int stage, const std::string& check) {
  return R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true)" + check + R"(},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "zero_optimization": {"stage": )" +
         std::to_string(stage) +
         R"(, "reduce_bucket_size": 1000, "stage3_param_persistence_threshold": 20}})";
}

// One micro-step of bf16 gradients; `poison` writes `bad` into one element of p4 on rank 0.
engine::StepStats step(engine::Engine& e, int n, bool poison, float bad) {
  const Model model;
  for (std::size_t m : kModuleOrder) {
    e.pre_forward(m);
    e.post_forward(m);
  }
  for (auto it = kModuleOrder.rbegin(); it != kModuleOrder.rend(); ++it) {
    e.pre_backward(*it);
    for (std::size_t p : model.modules[*it]) {
      if (p == kFrozen) continue;
      auto* grad = static_cast<std::uint16_t*>(e.grad_buffer(p));
      for (std::int64_t i = 0; i < model.sizes[p]; ++i) {
        const float g = 0.01f * static_cast<float>(1 + (i + n + static_cast<int>(p)) % 5);
        grad[i] = float_to_bf16(bf16_to_float(grad[i]) + g);
      }
      if (poison && p == 4 && e.rank() == 0) grad[17] = float_to_bf16(bad);
    }
    e.post_backward(*it);
  }
  return e.step();
}

std::vector<std::vector<float>> masters(engine::Engine& e) {
  std::vector<std::vector<float>> out;
  for (std::size_t p = 0; p < e.registry().param_count(); ++p) out.push_back(e.read_param(p));
  return out;
}

bool any_nan(const std::vector<std::vector<float>>& values) {
  for (const auto& v : values) {
    for (float x : v) {
      if (std::isnan(x)) return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE("engine bf16: a step on non-finite gradients is skipped (check_grad_overflow)",
          "[engine]") {
  for (int stage = 0; stage <= 3; ++stage) {
    for (const float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      INFO("stage " << stage << ", " << bad);
      auto e = make_engine(bf16_config(stage, ""));  // the default: checked
      step(*e, 0, false, 0);
      const auto before = masters(*e);
      const engine::StepStats skipped = step(*e, 1, true, bad);
      CHECK(skipped.skipped);
      CHECK(skipped.global_steps == 2);
      const auto after = masters(*e);
      for (std::size_t p = 0; p < before.size(); ++p) {
        CHECK(std::memcmp(before[p].data(), after[p].data(), before[p].size() * 4) == 0);
      }
      const engine::StepStats next = step(*e, 2, false, 0);  // and trains on, clean
      CHECK_FALSE(next.skipped);
      CHECK(masters(*e) != after);
      CHECK_FALSE(any_nan(masters(*e)));
    }
  }
}

TEST_CASE("engine bf16: check_grad_overflow false takes the step, NaN and all", "[engine]") {
  auto e = make_engine(bf16_config(2, R"(, "check_grad_overflow": false)"));
  step(*e, 0, false, 0);
  const engine::StepStats taken = step(*e, 1, true, std::numeric_limits<float>::quiet_NaN());
  CHECK_FALSE(taken.skipped);
  CHECK(any_nan(masters(*e)));
}

}  // namespace zero::testing
