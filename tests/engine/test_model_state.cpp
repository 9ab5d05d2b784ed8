// The ModelState alone (engine/state/model_state.h): its arenas are the plan's, every block the
// plan lists is taken and no other, and values assigned from a ValueSource come back from wherever
// they live (device memory, host memory, the optimizer's swap file).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "tests/engine/engine_parts.h"
#include "tests/scratch.h"

namespace zero::engine {
namespace {

using testing::ArithmeticValues;
using testing::EngineParts;

std::string config_for(const std::string& precision, int stage, const std::string& optimizer,
                       const std::string& params, const std::string& nvme) {
  return R"({"train_micro_batch_size_per_gpu": 1, )" + precision +
         R"( "optimizer": {"type": "AdamW"},
             "zero_optimization": {"stage": )" +
         std::to_string(stage) +
         R"(, "reduce_bucket_size": 64, "sub_group_size": 40,
             "stage3_param_persistence_threshold": 0,
             "offload_optimizer": {"device": ")" +
         optimizer + R"(", "nvme_path": ")" + nvme +
         R"(", "buffer_count": 3, "max_in_cpu": 40},
             "offload_param": {"device": ")" +
         params + R"(", "nvme_path": ")" + nvme + R"(", "buffer_size": 200, "max_in_cpu": 40}}})";
}

struct Placement {
  const char* precision;
  int stage;
  const char* optimizer;
  const char* params;
};

const Placement kPlacements[] = {
    {"", 0, "none", "none"},
    {R"("bf16": {"enabled": true},)", 1, "none", "none"},
    {R"("bf16": {"enabled": true},)", 2, "cpu", "none"},
    {R"("bf16": {"enabled": true},)", 3, "none", "none"},
    {R"("bf16": {"enabled": true},)", 3, "cpu", "cpu"},
    {R"("bf16": {"enabled": true},)", 3, "nvme", "nvme"},
    {"", 3, "nvme", "cpu"},
};

std::string describe(const Placement& p) {
  return std::string(p.precision[0] == '\0' ? "fp32" : "bf16") + ", stage " +
         std::to_string(p.stage) + ", optimizer " + p.optimizer + ", params " + p.params;
}

}  // namespace

TEST_CASE("model state: the arenas are the plan's and hold what it lists", "[engine]") {
  zero::testing::ScratchDir scratch("model-state-plan");
  for (const Placement& placement : kPlacements) {
    INFO(describe(placement));
    EngineParts parts(config_for(placement.precision, placement.stage, placement.optimizer,
                                 placement.params, scratch.path()));
    const auto arenas = parts.state->arenas();
    const ArenaPlan* planned[] = {&parts.plan.state, &parts.plan.offload, &parts.plan.param,
                                  &parts.plan.nvme, &parts.plan.param_nvme};
    for (std::size_t a = 0; a < arenas.size(); ++a) {
      INFO("arena " << planned[a]->name);
      REQUIRE((arenas[a] != nullptr) == planned[a]->made());
      if (arenas[a] == nullptr) continue;
      CHECK(arenas[a]->capacity() == planned[a]->capacity);
      // What the arena holds after allocation is what the plan says it holds, kind by kind.
      for (std::size_t k = 0; k < kAllMemoryKinds.size(); ++k) {
        INFO("kind " << memory_kind_name(kAllMemoryKinds[k]));
        CHECK(arenas[a]->usage(kAllMemoryKinds[k]).live == planned[a]->held[k]);
      }
    }
  }
}

TEST_CASE("model state: assigned values come back from wherever they live", "[engine]") {
  zero::testing::ScratchDir scratch("model-state-assign");
  for (const Placement& placement : kPlacements) {
    INFO(describe(placement));
    EngineParts parts(config_for(placement.precision, placement.stage, placement.optimizer,
                                 placement.params, scratch.path()));
    ArithmeticValues values;
    parts.state->assign(values);
    for (std::size_t t = 0; t < parts.layout.trainable.size(); ++t) {
      const std::size_t p = parts.layout.trainable[t];
      const std::size_t n = parts.registry.param(p).numel;
      INFO("parameter " << parts.registry.param(p).name);
      // The fp32 master, through device memory; fp32 at stage 0 keeps none: the compute copy
      // is the value.
      std::vector<float> master(n);
      if (parts.state->master_is_param()) {
        parts.device->copy(master.data(), parts.state->master_of(p), n * 4);
      } else {
        auto* on_device = static_cast<float*>(parts.device->reserve(Tier::device, n * 4));
        parts.state->copy_master(parts.layout.params[p].flat, n, on_device);
        parts.device->copy(master.data(), on_device, n * 4);
        parts.device->unreserve(Tier::device, on_device, n * 4);
      }
      std::vector<float> want(n);
      values.values(p, 0, n, want.data());
      CHECK(master == want);
    }
  }
}

TEST_CASE("model state: a swapped step group is found where the layout puts it", "[engine]") {
  zero::testing::ScratchDir scratch("model-state-groups");
  EngineParts parts(config_for(R"("bf16": {"enabled": true},)", 3, "nvme", "none", scratch.path()));
  // sub_group_size 40 over 37 + 101 + 15 owned elements: several groups, the first resident
  // (max_in_cpu 40), the rest swapped.
  REQUIRE(parts.layout.step_groups.size() > 2);
  CHECK(parts.layout.resident_groups >= 1);
  CHECK(parts.layout.resident_groups < parts.layout.step_groups.size());
  for (std::size_t g = 0; g < parts.layout.step_groups.size(); ++g) {
    const std::size_t lo = parts.layout.group_lo[g];
    CHECK(parts.state->group_at(lo) == g);
    if (parts.layout.step_groups[g].block > 1) CHECK(parts.state->group_at(lo + 1) == g);
  }
  REQUIRE(parts.state->swap() != nullptr);
  CHECK(parts.state->swap()->groups() ==
        parts.layout.step_groups.size() - parts.layout.resident_groups);
}

}  // namespace zero::engine

namespace zero::engine {

TEST_CASE(
    "model state: offloaded state is pinned beside a GPU and pageable on the CPU device "
    "unless pin_memory says otherwise",
    "[engine]") {
  struct Case {
    const char* pin;  // the offload sections' pin_memory, "" for none
    CpuDeviceMode mode;
    Tier want;
  };
  const Case cases[] = {
      {"", CpuDeviceMode::async, Tier::pinned},  // async stands in for a GPU
      {"", CpuDeviceMode::sync, Tier::host},
      {R"(, "pin_memory": "auto")", CpuDeviceMode::async, Tier::pinned},
      {R"(, "pin_memory": false)", CpuDeviceMode::async, Tier::host},
      {R"(, "pin_memory": true)", CpuDeviceMode::sync, Tier::pinned},
  };
  for (const Case& c : cases) {
    INFO("pin_memory '" << c.pin << "', " << (c.mode == CpuDeviceMode::sync ? "sync" : "async"));
    const std::string config = std::string(R"({"train_micro_batch_size_per_gpu": 1,
        "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3,
        "offload_optimizer": {"device": "cpu")") +
                               c.pin + R"(}, "offload_param": {"device": "cpu")" + c.pin + "}}}";
    EngineParts parts(config, testing::two_modules, c.mode);
    CHECK(parts.plan.offload.tier == c.want);
    CHECK(parts.plan.param.tier == c.want);
    CHECK(parts.state->arenas()[1]->tier() == c.want);
  }
}

}  // namespace zero::engine
