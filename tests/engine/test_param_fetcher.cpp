// The ParamFetcher alone (engine/fetching/param_fetcher.h), over a fake ShardStore, the local
// communicator and the asynchronous CPU device: what it asks of the store for each kind of
// shard, and that what it gathers is the shard.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/backends.h"
#include "config/config.h"
#include "device/arena.h"
#include "device/device.h"
#include "engine/engine_context.h"
#include "engine/fetching/param_fetcher.h"
#include "engine/plan/memory_plan.h"
#include "engine/plan/registry.h"
#include "engine/state/shard_store.h"

namespace zero::engine {
namespace {

// Shards in host memory, each element its parameter's index plus its place; records which way
// the fetcher took them.
class HostShards final : public ShardStore {
 public:
  HostShards(Device& device, const Registry& registry) : device_(device) {
    for (std::size_t p = 0; p < registry.param_count(); ++p) {
      std::vector<float> shard(registry.param(p).numel);
      for (std::size_t i = 0; i < shard.size(); ++i) shard[i] = static_cast<float>(p * 1000 + i);
      shards_.push_back(std::move(shard));
    }
  }

  const void* device_shard(std::size_t) override { return nullptr; }
  void copy_shard(std::size_t param, void* place) override {
    synchronous_copies += 1;
    device_.copy(place, shards_[param].data(), shards_[param].size() * sizeof(float));
  }
  void place_shard(std::size_t param, void* place, Stream& stream) override {
    queued_copies += 1;
    device_.copy_async(place, shards_[param].data(), shards_[param].size() * sizeof(float), stream);
  }
  bool swapped(std::size_t) const override { return false; }
  std::size_t read_buffers() const override { return 0; }
  offload::Ticket start_read(std::size_t, std::size_t) override { return {}; }
  const void* finish_read(offload::Ticket, std::size_t) override { return nullptr; }

  int synchronous_copies = 0;
  int queued_copies = 0;

 private:
  Device& device_;
  std::vector<std::vector<float>> shards_;
};

struct Setup {
  Setup() : device(create_cpu_device(CpuDeviceMode::async)) {
    comm::CommOptions options;
    options.device = device.get();
    options.timeout = std::chrono::seconds(30);
    comm = comm::make_local_communicator(options);
    config = config::read_config_text(
        R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                  "offload_param": {"device": "cpu"}}})",
        {});
    const std::size_t a = registry.add_module("a");
    const std::size_t b = registry.add_module("b");
    registry.add_param("a.weight", {37}, true, 0, {a});
    registry.add_param("b.weight", {3, 41}, true, 0, {b});
    registry.freeze();
    layout = plan_layout(registry, config, 1);
  }
  EngineContext context() { return {config, registry, layout, *device, *comm}; }

  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  config::Config config;
  Registry registry;
  Layout layout;
};

}  // namespace

TEST_CASE("param fetcher: a shard in host memory is copied up in the stream's order", "[engine]") {
  Setup setup;
  HostShards shards(*setup.device, setup.registry);
  ParamFetcher fetcher(setup.context());
  fetcher.attach(std::make_unique<Arena>(setup.device.get(), Tier::device, 1 << 16, "gathered"),
                 shards);
  auto caller = setup.device->wrap_stream(nullptr);
  for (std::size_t module = 0; module < 2; ++module) {
    fetcher.enter(module, /*backward=*/false, /*train=*/true, /*top=*/true, *caller);
    for (std::size_t p : setup.registry.module(module).params) {
      const auto* full = static_cast<const float*>(fetcher.data(p));
      REQUIRE(full != nullptr);
      for (std::size_t i = 0; i < setup.registry.param(p).numel; ++i) {
        INFO("parameter " << p << ", element " << i);
        REQUIRE(full[i] == static_cast<float>(p * 1000 + i));
      }
    }
    fetcher.leave(module, /*train=*/true);
  }
  // The host never waited for a copy: each was queued before its gather.
  CHECK(shards.queued_copies == 2);
  CHECK(shards.synchronous_copies == 0);
}

}  // namespace zero::engine
