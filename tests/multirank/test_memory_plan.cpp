// zero-mem's prediction against the engine: for several small models (GPT shapes registered
// as models/gpt registers them, and a stack of uniform layers), stages 0-3 and every offload
// mode, the planner's rows (the planner library zero-mem prints, asked for this job's world)
// must give every arena's capacity and its peak bytes by kind exactly as the engine, run for
// two steps on these ranks, made and used them.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "comm/create.h"
#include "device/device.h"
#include "engine/engine.h"
#include "multirank.h"
#include "tools/zero-mem/planner.h"

namespace zero::testing {
namespace {

using nlohmann::json;

// The engine for one of the planner's rows, with the row's model registered as the planner
// registered it.
std::unique_ptr<engine::Engine> engine_for(const mem::Request& request, const mem::Mode& mode) {
  auto device = create_device({});
  comm::CommOptions comm_options;
  comm_options.backend = comm::Backend::mpi;
  comm_options.timeout = std::chrono::seconds(120);
  comm_options.device = device.get();
  auto comm = comm::create_communicator(comm_options);
  auto e = std::make_unique<engine::Engine>(mem::mode_config(request, mode), std::move(device),
                                            std::move(comm));
  const engine::Registry& r = request.model.registry;
  for (std::size_t g = 1; g < r.group_count(); ++g) {
    e->add_group(r.group(g).name, r.group(g).weight_decay, r.group(g).lr_scale);
  }
  for (const engine::ModuleSpec& m : r.modules()) e->add_module(m.name);
  for (const engine::ParamSpec& p : r.params()) {
    engine::InitialValue initial;
    initial.initializer = [](std::uint64_t offset, std::size_t count, float* out) {
      for (std::size_t i = 0; i < count; ++i) out[i] = 0.01f * static_cast<float>((offset + i) % 7);
    };
    e->add_param(p.name, p.shape, p.trainable, p.group, p.modules, initial);
  }
  e->init();
  return e;
}

// A micro-step in registration order (backward in reverse), every gradient written in fp32.
void micro_step(engine::Engine& e, const engine::Registry& r) {
  for (std::size_t m = 0; m < r.module_count(); ++m) {
    e.pre_forward(m);
    e.post_forward(m);
  }
  for (std::size_t m = r.module_count(); m-- > 0;) {
    e.pre_backward(m);
    for (std::size_t p : r.module(m).params) {
      if (e.compute_dtype() != DType::f32) continue;
      auto* grad = static_cast<float*>(e.grad_buffer(p));
      for (std::size_t i = 0; i < r.param(p).numel; ++i) grad[i] += 1e-3f;
    }
    e.post_backward(m);
  }
  e.step();
}

mem::Request request_for(mem::ModelShape model, const std::string& precision, int world,
                         bool prefetch) {
  mem::Request request;
  request.model = std::move(model);
  request.hardware.gpus_per_node = world;
  request.hardware.nodes = 1;
  request.hardware.nvme = 1ull << 40;
  request.seq = 8;
  request.config = json::parse(R"({
      "train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1}},
      "zero_optimization": {
        "reduce_bucket_size": 20000, "allgather_bucket_size": 30000, "sub_group_size": 9000,
        "stage3_param_persistence_threshold": 200, "stage3_max_live_parameters": 60000,
        "offload_optimizer": {"nvme_path": ".", "buffer_count": 3, "pin_memory": true},
        "offload_param": {"nvme_path": ".", "max_in_cpu": 0, "buffer_count": 3,
                          "buffer_size": 100000000}}})");
  if (!prefetch) {
    request.config["zero_optimization"]["stage3_prefetch_bucket_size"] = 0;
    request.config["zero_optimization"]["stage3_max_reuse_distance"] = 0;
  }
  if (precision == "bf16") request.config["bf16"] = {{"enabled", true}};
  return request;
}

}  // namespace

TEST_CASE("zero-mem: every arena's capacity and peak are the engine's own", "[engine][zero-mem]") {
  const int world = variants().front().comm->size();
  struct Model {
    const char* what;
    mem::ModelShape shape;
  };
  std::vector<Model> models;
  models.push_back({"GPT 2 layers, 48 channels", mem::gpt_model({{2, 4, 48, 16, 61}, 192}, 0.1)});
  models.push_back(
      {"GPT 3 layers, 40 channels, MLP 100", mem::gpt_model({{3, 5, 40, 9, 37}, 100}, 0.1)});
  mem::ModelArgs stack;
  stack.params = 50001;
  stack.largest_layer = 7000;
  models.push_back({"8 layers of 7000", mem::build_model(stack)});

  for (const Model& model : models) {
    for (const char* precision : {"fp32", "bf16"}) {
      for (bool prefetch : {false, true}) {
        const mem::Request request = request_for(model.shape, precision, world, prefetch);
        for (int stage = 0; stage <= 3; ++stage) {
          if (prefetch && stage != 3) continue;
          for (const mem::Mode& mode : mem::modes_for(stage, /*nvme=*/true)) {
            if (mode.name == "optimizer split") continue;  // the nvme row with another max_in_cpu
            INFO(model.what << ", " << precision << ", stage " << stage << ", " << mode.name
                            << (prefetch ? ", prefetching" : "") << ", " << world << " ranks");
            const config::Config config = mem::mode_config(request, mode);
            const engine::Layout layout =
                engine::plan_layout(request.model.registry, config, world);
            const engine::MemoryPlan plan =
                engine::plan_memory(request.model.registry, config, layout, /*gpu=*/false);
            auto e = engine_for(request, mode);
            micro_step(*e, request.model.registry);
            micro_step(*e, request.model.registry);
            const auto arenas = e->arena_usage();
            std::size_t found = 0;
            for (const engine::ArenaPlan* predicted : plan.arenas()) {
              if (!predicted->made()) continue;
              ++found;
              const engine::ArenaUsage* made = nullptr;
              for (const auto& a : arenas) {
                if (a.name == predicted->name) made = &a;
              }
              INFO("arena " << predicted->name);
              REQUIRE(made != nullptr);
              CHECK(made->tier == predicted->tier);
              CHECK(made->capacity == predicted->capacity);
              for (std::size_t k = 0; k < kAllMemoryKinds.size(); ++k) {
                INFO("kind " << memory_kind_name(kAllMemoryKinds[k]));
                if (predicted->peak_exact) {
                  CHECK(made->peak[k] == predicted->peak[k]);
                } else {
                  CHECK(made->peak[k] <= predicted->peak[k]);
                }
                CHECK(made->live[k] >= predicted->held[k]);
              }
            }
            CHECK(found == arenas.size());
            for (Tier tier : kAllTiers) {
              INFO("tier " << tier_name(tier));
              CHECK(e->reserved_bytes(tier) == plan.reserved(tier));
            }
          }
        }
      }
    }
  }
}

}  // namespace zero::testing
