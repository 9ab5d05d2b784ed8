// An engine on an embedder's NCCL communicator (zero_create_options.nccl_comm goes through
// comm::wrap_nccl_communicator): a world of one made with the NCCL API, wrapped, an engine made
// on it; the engine reports the embedder's rank and size, and the handle outlives the engine
// (zero never frees an embedder's communicator).
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>

#include <nccl.h>

#include "comm/create.h"
#include "config/config.h"
#include "device/device.h"
#include "engine/engine.h"

namespace zero {

TEST_CASE("engine on CUDA: it runs on an embedder's NCCL communicator and leaves it open",
          "[gpu][engine]") {
  DeviceOptions device_options;
  device_options.preference = DevicePreference::cuda;
  auto device = create_device(device_options);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t handle = nullptr;
  REQUIRE(ncclCommInitRank(&handle, 1, id, 0) == ncclSuccess);
  {
    comm::CommOptions options;
    options.device = device.get();
    options.timeout = std::chrono::seconds(60);
    auto comm = comm::wrap_nccl_communicator(handle, options);
    const std::string text = R"({"train_micro_batch_size_per_gpu": 1,
        "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 0}})";
    engine::Engine engine(config::read_config_text(text, {}), std::move(device), std::move(comm),
                          {});
    CHECK(engine.rank() == 0);
    CHECK(engine.world_size() == 1);
  }
  // Still the embedder's, and still usable.
  int count = 0;
  CHECK(ncclCommCount(handle, &count) == ncclSuccess);
  CHECK(count == 1);
  CHECK(ncclCommDestroy(handle) == ncclSuccess);
}

}  // namespace zero
