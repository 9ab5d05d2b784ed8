// The Stepper alone (engine/stepping/stepper.h), on owned gradients written directly into the
// ModelState: the reported norm is the unscaled gradients', clipping divides the gradient by
// DeepSpeed's coefficient, a non-finite fp16 gradient skips the step (masters unchanged,
// counters and gradients as DeepSpeed leaves them), and the result lands in every placement
// (device memory, and with optimizer offload host memory through the staging).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "base/half.h"
#include "tests/engine/engine_parts.h"
#include "tests/stream_hold.h"

namespace zero::engine {
namespace {

using testing::ArithmeticValues;
using testing::EngineParts;
using testing::master_of;

std::string sgd_config(const std::string& extra, const std::string& offload) {
  return R"({"train_micro_batch_size_per_gpu": 1, )" + extra +
         R"( "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
             "zero_optimization": {"stage": 1, "sub_group_size": 50,
                                   "offload_optimizer": {"device": ")" +
         offload + R"("}}})";
}

// The owned gradient shard set to g(p, i) = (p + 1) * 0.01 * (i % 7 - 3), in the accumulation
// dtype (fp32, or fp16 for an fp16 config); returns the sum of squares of the fp32 values.
double set_grads(EngineParts& parts, float poison = 0.0f) {
  double squares = 0;
  for (std::size_t p : parts.layout.trainable) {
    const std::size_t n = parts.registry.param(p).numel;
    std::vector<float> g(n);
    for (std::size_t i = 0; i < n; ++i) {
      g[i] = static_cast<float>(p + 1) * 0.01f * static_cast<float>(static_cast<int>(i % 7) - 3);
      squares += static_cast<double>(g[i]) * g[i];
    }
    if (poison != 0.0f && p == 1) g[5] = poison;
    testing::write_owned_grad(parts, p, g);
  }
  return squares;
}

// What SGD makes of ArithmeticValues and set_grads' gradients with the gradient scaled by
// `scale`, in fp32 as the kernels compute it.
float expected(std::size_t p, std::size_t i, double scale) {
  const float value = static_cast<float>(p) * 100.0f + static_cast<float>(i) / 8.0f;
  const float g =
      static_cast<float>(p + 1) * 0.01f * static_cast<float>(static_cast<int>(i % 7) - 3);
  return static_cast<float>(value - 0.5 * (static_cast<double>(g) * scale));
}

// The boundary's step with its verdict known: where it stayed on the device (the optimizer not
// offloaded), settled after the step, as the engine does when asked for the stats.
StepStats step_settled(EngineParts& parts) {
  StepStats stats = parts.stepper->step();
  CHECK(stats.verdict_pending == parts.layout.modes.verdict_on_device());
  if (const auto outcome = parts.stepper->settle_verdict()) {
    CHECK(outcome->step.global_step == parts.stepper->global_steps());
    stats.skipped = outcome->skipped;
    stats.grad_norm = outcome->grad_norm;
    stats.verdict_pending = false;
  }
  CHECK_FALSE(parts.stepper->settle_verdict());  // taken once
  return stats;
}

void check_step(EngineParts& parts, double scale) {
  for (std::size_t p : parts.layout.trainable) {
    const std::vector<float> got = master_of(parts, p);
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("parameter " << p << ", element " << i);
      CHECK(got[i] == Approx(expected(p, i, scale)).epsilon(1e-6).margin(1e-6));
    }
  }
}

}  // namespace

TEST_CASE("stepper: the norm is the gradients', and clipping divides them by its coefficient",
          "[engine]") {
  for (const char* offload : {"none", "cpu"}) {
    INFO("offload_optimizer " << offload);
    // No clipping: the gradient as it is.
    {
      EngineParts parts(sgd_config("", offload));
      ArithmeticValues values;
      parts.state->assign(values);
      const double norm = std::sqrt(set_grads(parts));
      const StepStats stats = step_settled(parts);
      CHECK(stats.stepped);
      CHECK_FALSE(stats.skipped);
      CHECK(stats.grad_norm == Approx(norm).epsilon(1e-6));
      CHECK(stats.lr == 0.5);
      CHECK(parts.stepper->global_steps() == 1);
      CHECK(parts.stepper->optimizer_steps() == 1);
      check_step(parts, 1.0);
    }
    // Clipping at a tenth of the norm: DeepSpeed's coefficient (norm + 1e-6) / max.
    {
      EngineParts probe(sgd_config("", offload));
      const double norm = std::sqrt(set_grads(probe));
      const double max_norm = norm / 10;
      EngineParts parts(
          sgd_config(R"("gradient_clipping": )" + std::to_string(max_norm) + ",", offload));
      ArithmeticValues values;
      parts.state->assign(values);
      set_grads(parts);
      const StepStats stats = step_settled(parts);
      CHECK(stats.grad_norm == Approx(norm).epsilon(1e-6));
      check_step(parts, max_norm / (norm + 1e-6));
    }
  }
}

TEST_CASE("stepper: a non-finite fp16 gradient skips the step and keeps the masters", "[engine]") {
  EngineParts parts(sgd_config(R"("fp16": {"enabled": true, "initial_scale_power": 4,
                                           "hysteresis": 1},)",
                               "none"));
  ArithmeticValues values;
  parts.state->assign(values);
  const std::vector<float> before = master_of(parts, 1);
  set_grads(parts, std::numeric_limits<float>::infinity());
  const double scale = parts.stepper->scaler().scale();
  const StepStats stats = parts.stepper->step();
  CHECK(stats.skipped);
  CHECK(stats.loss_scale == scale);
  CHECK(parts.stepper->global_steps() == 1);            // counted, as DeepSpeed counts it
  CHECK(parts.stepper->optimizer_steps() == 0);         // the optimizer and the schedule held
  CHECK(parts.stepper->scaler().scale() == scale / 2);  // hysteresis 1: it drops at once
  CHECK(master_of(parts, 1) == before);
  // The gradients the optimizer reads are back to zero for the next window: written lazily,
  // by the next reduction or, as here where none comes, before the owned shard is read.
  parts.reducer->settle_owned(parts.layout.owned.total, parts.device->default_stream());
  parts.device->synchronize();
  REQUIRE(parts.layout.modes.accum == DType::f16);
  const auto* flat = static_cast<const std::uint16_t*>(parts.state->grad_flat());
  CHECK(std::vector<std::uint16_t>(flat, flat + parts.layout.owned.total) ==
        std::vector<std::uint16_t>(parts.layout.owned.total, 0));
}

TEST_CASE(
    "stepper: with the verdict on the device a non-finite bf16 gradient skips the step as it "
    "runs, and the host takes the count back when it settles the verdict",
    "[engine]") {
  for (const char* offload : {"none", "cpu"}) {
    INFO("offload_optimizer " << offload);
    EngineParts parts(
        sgd_config(R"("bf16": {"enabled": true, "check_grad_overflow": true},)", offload));
    REQUIRE(parts.layout.modes.verdict_on_device() == (std::string(offload) == "none"));
    ArithmeticValues values;
    parts.state->assign(values);
    const std::vector<float> before = master_of(parts, 1);
    // The replicated bf16 copies, which stage 1 gathers from each rank's copy-out after a step.
    const auto compute_copies = [&] {
      std::vector<std::uint16_t> bits;
      for (std::size_t p : parts.layout.trainable) {
        std::vector<std::uint16_t> one(parts.registry.param(p).numel);
        parts.device->copy(one.data(), parts.state->full(p), one.size() * 2);
        bits.insert(bits.end(), one.begin(), one.end());
      }
      return bits;
    };
    const std::vector<std::uint16_t> copies_before = compute_copies();
    set_grads(parts, std::numeric_limits<float>::quiet_NaN());
    const StepStats stats = parts.stepper->step();
    CHECK(parts.stepper->global_steps() == 1);
    if (stats.verdict_pending) {
      // Queued as if it stands; the optimizer read the flag where it ran.
      CHECK(parts.stepper->optimizer_steps() == 1);
      const auto outcome = parts.stepper->settle_verdict();
      REQUIRE(outcome);
      CHECK(outcome->skipped);
      CHECK(outcome->grad_norm == 0.0);
      CHECK(outcome->step.global_step == 1);
      CHECK(outcome->step.optimizer_step == 1);
    } else {
      CHECK(stats.skipped);
    }
    CHECK(parts.stepper->optimizer_steps() == 0);
    CHECK(master_of(parts, 1) == before);
    CHECK(compute_copies() == copies_before);  // gathered from copy-outs of the kept masters
    // The next window steps as the first: the optimizer's count and the schedule held.
    set_grads(parts);
    const StepStats next = step_settled(parts);
    CHECK_FALSE(next.skipped);
    CHECK(parts.stepper->global_steps() == 2);
    CHECK(parts.stepper->optimizer_steps() == 1);
  }
}

}  // namespace zero::engine

namespace zero::engine {

TEST_CASE(
    "stepper: with the verdict on the device, stages 1 and 2 queue each group's all-gather of the "
    "updated shards behind its step without the host waiting for either",
    "[engine]") {
  // On the asynchronous CPU device (streams on their own threads, as a GPU's) with the local
  // communicator, whose all-gather is a copy on the device: the device's stream is held before
  // the step, so a step() that waited for a group's update or its all-gather would wait for the
  // hold (which gives up after 10 s). With wall_clock_breakdown the all-gathers are timed by the
  // device's events, which wait for nothing either.
  const int stage = GENERATE(1, 2);
  const bool breakdown = GENERATE(false, true);
  INFO("stage " << stage << (breakdown ? ", wall_clock_breakdown" : ""));
  EngineParts parts(std::string(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
      "wall_clock_breakdown": )") +
                    (breakdown ? "true" : "false") + R"(,
      "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
      "zero_optimization": {"stage": )" +
                    std::to_string(stage) +
                    R"(, "sub_group_size": 50, "allgather_bucket_size": 50}})");
  REQUIRE(parts.layout.modes.verdict_on_device());
  REQUIRE(parts.layout.step_groups.size() > 1);
  ArithmeticValues values;
  parts.state->assign(values);
  std::vector<std::vector<float>> before;
  for (std::size_t p : parts.layout.trainable) before.push_back(master_of(parts, p));
  set_grads(parts);
  zero::testing::StreamHold hold(*parts.device, parts.device->default_stream());
  const StepStats stats = parts.stepper->step();
  hold.release();
  CHECK_FALSE(hold.gave_up());  // step() returned with the device still held
  CHECK(stats.verdict_pending);
  const auto outcome = parts.stepper->settle_verdict();
  REQUIRE(outcome);
  CHECK_FALSE(outcome->skipped);
  parts.device->synchronize();
  if (breakdown) CHECK(parts.stepper->take_allgather_seconds() > 0.0);
  // Every replicated compute copy is the bf16 of its updated master: gathered after the update.
  for (std::size_t k = 0; k < parts.layout.trainable.size(); ++k) {
    const std::size_t p = parts.layout.trainable[k];
    INFO("parameter " << p);
    const std::vector<float> master = master_of(parts, p);
    CHECK(master != before[k]);  // stepped
    std::vector<std::uint16_t> copy(master.size());
    parts.device->copy(copy.data(), parts.state->full(p), copy.size() * 2);
    std::vector<std::uint16_t> want(master.size());
    for (std::size_t i = 0; i < master.size(); ++i) want[i] = float_to_bf16(master[i]);
    CHECK(copy == want);
  }
}

TEST_CASE("stepper: a learning rate set by the caller replaces the schedule's from the next step",
          "[engine]") {
  EngineParts parts(sgd_config("", "none"));
  ArithmeticValues values;
  parts.state->assign(values);
  CHECK(parts.stepper->schedule_value(1).lr == 0.5);
  parts.stepper->set_learning_rate(0.25);
  CHECK(parts.stepper->schedule_value(1).lr == 0.25);
  CHECK(parts.stepper->schedule_value(7).lr == 0.25);
  set_grads(parts);
  const StepStats stats = step_settled(parts);
  CHECK(stats.lr == 0.25);
  // SGD at half the config's lr moves each master as the config's lr would a gradient of half.
  check_step(parts, 0.5);
}

}  // namespace zero::engine
