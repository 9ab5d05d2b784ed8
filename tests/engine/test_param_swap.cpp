// ParamSwap alone (engine/state/param_swap.h), over a real params.swap in a scratch directory:
// which parameters it swaps (the compute shards past the layout's resident end), their regions
// (aligned for direct I/O, apart in the file), and that every way in gives back what went out:
// initial values (staging, store, read), a step's assembly in alternating buffers
// (assemble, write_assembled, finish_writes), and the fetcher's reads ahead through its read
// buffers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/direct_io.h"
#include "comm/backends.h"
#include "config/config.h"
#include "device/arena.h"
#include "device/device.h"
#include "engine/engine_context.h"
#include "engine/plan/memory_plan.h"
#include "engine/plan/registry.h"
#include "engine/state/param_swap.h"
#include "offload/aio.h"
#include "offload/swap.h"
#include "tests/engine/engine_parts.h"
#include "tests/scratch.h"

namespace zero::engine {
namespace {

// Six parameters of odd sizes in three modules (two_modules' and two more in a third); stage 3 on
// one rank, bf16 compute shards, 40 elements kept in memory and the rest swapped; two read buffers
// ahead.
struct ParamSwapRig {
  explicit ParamSwapRig(const std::string& name) : scratch(name) {
    device = create_cpu_device(CpuDeviceMode::sync);
    comm::CommOptions options;
    options.device = device.get();
    options.timeout = std::chrono::seconds(30);
    comm = comm::make_local_communicator(options);
    config = config::read_config_text(
        R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
            "optimizer": {"type": "AdamW"},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
              "offload_param": {"device": "nvme", "nvme_path": ")" +
            scratch.path() + R"(", "buffer_size": 3000, "buffer_count": 2, "max_in_cpu": 40}}})",
        {});
    testing::two_modules(registry);  // p0-p3 in modules a and b
    const std::size_t c = registry.add_module("c");
    registry.add_param("p4", {1031}, true, 0, {c});
    registry.add_param("p5", {2}, true, 0, {c});
    registry.freeze();
    layout = plan_layout(registry, config, 1);
    plan = plan_memory(registry, config, layout, false);
    io = offload::AsyncIO::create({});
    dir = std::make_unique<offload::SwapDirectory>(scratch.path(), "job", 0);
    host = std::make_unique<Arena>(device.get(), Tier::pinned, std::size_t{1} << 20, "host");
    swap = std::make_unique<ParamSwap>(EngineContext{config, registry, layout, *device, *comm},
                                       plan, *io, *dir, *host);
  }
  ~ParamSwapRig() { swap.reset(); }

  std::size_t shard_bytes(std::size_t p) const { return layout.params[p].shape.shard * 2; }
  // A pattern of `bytes` bytes, different per parameter and per `round`.
  static std::vector<unsigned char> pattern(std::size_t p, int round, std::size_t bytes) {
    std::vector<unsigned char> out(bytes);
    for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(p * 31 + i + round);
    return out;
  }

  zero::testing::ScratchDir scratch;
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  config::Config config;
  Registry registry;
  Layout layout;
  MemoryPlan plan;
  std::unique_ptr<offload::AsyncIO> io;
  std::unique_ptr<offload::SwapDirectory> dir;
  std::unique_ptr<Arena> host;
  std::unique_ptr<ParamSwap> swap;
};

bool zeroed(const char* bytes, std::size_t count) {
  return std::all_of(bytes, bytes + count, [](char b) { return b == 0; });
}

}  // namespace

TEST_CASE("param swap: the shards past the resident end, in aligned regions apart",
          "[engine][swap]") {
  ParamSwapRig rig("param-swap-regions");
  std::size_t swapped = 0;
  for (std::size_t p = 0; p < rig.registry.param_count(); ++p) {
    INFO("parameter p" << p);
    const std::size_t flat = rig.layout.params[p].compute_flat;
    CHECK(rig.swap->swapped(p) == (flat != kNone && flat >= rig.layout.compute_resident_end));
    swapped += rig.swap->swapped(p);
    CHECK(rig.swap->region_bytes(p) % kDirectIoAlignment == 0);
    CHECK(rig.swap->region_bytes(p) >= rig.shard_bytes(p));
    CHECK(rig.swap->region_bytes(p) < rig.shard_bytes(p) + kDirectIoAlignment);
  }
  CHECK(swapped >= 2);  // the plan kept 40 elements in memory, not everything
  CHECK(swapped < rig.registry.param_count());
  CHECK(rig.swap->read_buffers() == 2);
  // The file holds every region: its arena counts them, and it was made at that size.
  std::size_t regions = 0;
  for (std::size_t p = 0; p < rig.registry.param_count(); ++p) {
    if (rig.swap->swapped(p)) regions += rig.swap->region_bytes(p);
  }
  CHECK(rig.swap->arena().capacity() >= regions);
  bool found = false;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(rig.scratch.path())) {
    if (entry.path().filename() == "params.swap") {
      found = true;
      CHECK(entry.file_size() >= rig.swap->arena().capacity());
    }
  }
  CHECK(found);
}

TEST_CASE("param swap: initial values, a step's assembly and reads ahead give back what went out",
          "[engine][swap]") {
  ParamSwapRig rig("param-swap-values");
  std::vector<std::size_t> swapped;
  for (std::size_t p = 0; p < rig.registry.param_count(); ++p) {
    if (rig.swap->swapped(p)) swapped.push_back(p);
  }
  REQUIRE(swapped.size() >= 2);
  // Initial values: staged zeroed, stored; every region written before any is read back, so a
  // region that overlapped another would show.
  for (std::size_t p : swapped) {
    char* staging = rig.swap->staging(p);
    CHECK(zeroed(staging, rig.swap->region_bytes(p)));
    const auto values = ParamSwapRig::pattern(p, 0, rig.shard_bytes(p));
    std::memcpy(staging, values.data(), values.size());
    rig.swap->store(p);
  }
  for (std::size_t p : swapped) {
    INFO("initial values of p" << p);
    const auto values = ParamSwapRig::pattern(p, 0, rig.shard_bytes(p));
    CHECK(std::memcmp(rig.swap->read(p), values.data(), values.size()) == 0);
  }
  // A step: each shard assembled in two pieces (the buffer zeroed when its parameter starts),
  // written while the next is assembled; then read back through the read buffers.
  for (std::size_t p : swapped) {
    const auto values = ParamSwapRig::pattern(p, 1, rig.shard_bytes(p));
    const std::size_t half = values.size() / 2;
    char* into = rig.swap->assemble(p);
    CHECK(zeroed(into, rig.swap->region_bytes(p)));
    std::memcpy(into, values.data(), half);
    CHECK(rig.swap->assemble(p) == into);  // the same parameter: the same buffer, kept
    std::memcpy(into + half, values.data() + half, values.size() - half);
    rig.swap->write_assembled();
  }
  rig.swap->finish_writes();
  for (std::size_t k = 0; k < swapped.size(); ++k) {
    const std::size_t p = swapped[k];
    INFO("after the step, p" << p << " through read buffer " << k % 2);
    const offload::Ticket ticket = rig.swap->start_read(p, k % 2);
    const void* got = rig.swap->finish_read(ticket, k % 2);
    const auto values = ParamSwapRig::pattern(p, 1, rig.shard_bytes(p));
    CHECK(std::memcmp(got, values.data(), values.size()) == 0);
  }
}

}  // namespace zero::engine
