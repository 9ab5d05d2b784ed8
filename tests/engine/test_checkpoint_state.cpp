// CheckpointState alone (engine/state/checkpoint_state.h), over the parts on one rank: what it
// saves loads back into fresh parts at another stage and placement with the same masters and
// counters, and a checkpoint of another model is refused before anything changes, naming the
// parameter.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/engine/engine_parts.h"
#include "tests/scratch.h"

namespace zero::engine {
namespace {

using testing::ArithmeticValues;
using testing::EngineParts;
using testing::master_of;

std::string config(int stage, const std::string& offload) {
  return R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
             "optimizer": {"type": "AdamW"},
             "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "offload_optimizer": {"device": ")" + offload + R"("}}})";
}

void renamed(Registry& r) {
  const std::size_t a = r.add_module("a");
  const std::size_t b = r.add_module("b");
  r.add_param("p0", {37}, true, 0, {a});
  r.add_param("q1", {101}, true, 0, {b});
  r.add_param("p2", {5, 3}, true, 0, {a, b});
  r.add_param("p3", {9}, false, 0, {b});
}

}  // namespace

TEST_CASE("checkpoint state: what is saved loads into other parts at another stage", "[engine]") {
  zero::testing::ScratchDir scratch("checkpoint-state");
  EngineParts saved(config(1, "none"));
  ArithmeticValues values;
  saved.state->assign(values);
  saved.stepper->restore(5, 4, LossScaler::fixed(1.0), 99);
  saved.checkpoints->save(scratch.path(), {"tag", "user bytes"}, 10);

  EngineParts loaded(config(3, "cpu"));
  std::string partly;
  const LoadResult result = loaded.checkpoints->load(
      scratch.path(), {}, [&](std::string what) { partly = std::move(what); });
  CHECK(partly.empty());
  CHECK(result.tag == "tag");
  CHECK(result.user_data == "user bytes");
  CHECK(result.global_steps == 5);
  CHECK(loaded.stepper->global_steps() == 5);
  CHECK(loaded.stepper->optimizer_steps() == 4);
  CHECK(loaded.stepper->seed() == 99);
  for (std::size_t p : saved.layout.trainable) {
    INFO("parameter " << saved.registry.param(p).name);
    CHECK(master_of(loaded, p) == master_of(saved, p));
  }
}

TEST_CASE("checkpoint state: another model's checkpoint is refused before anything changes",
          "[engine]") {
  zero::testing::ScratchDir scratch("checkpoint-state-other");
  EngineParts saved(config(2, "none"), renamed);
  ArithmeticValues values;
  saved.state->assign(values);
  saved.checkpoints->save(scratch.path(), {}, 0);

  EngineParts loaded(config(2, "none"));
  const std::vector<float> before = master_of(loaded, 1);
  std::string partly;
  const Error error = zero::testing::error_of([&] {
    loaded.checkpoints->load(scratch.path(), {}, [&](std::string what) { partly = what; });
  });
  CHECK_THAT(error.what(), Catch::Contains("p1"));
  CHECK(partly.empty());  // refused before the state changed
  CHECK(master_of(loaded, 1) == before);
}

}  // namespace zero::engine
