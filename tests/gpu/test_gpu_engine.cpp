// The engine on a CUDA device, as far as it runs there today: created on GPU 0 with a world of
// one, it says its buffers live in that GPU's memory (what zero_data_location reports).
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "comm/create.h"
#include "device/device.h"
#include "engine/config/config.h"
#include "engine/engine.h"

namespace zero {

TEST_CASE("engine on CUDA: its buffers live in GPU 0's memory", "[gpu][engine]") {
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
  const std::string text = R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 0}})";
  engine::Engine engine(config::read_config_text(text, {}), std::move(device), std::move(comm),
                        {});
  CHECK(engine.device().type() == DeviceType::cuda);
  CHECK(engine.device().ordinal() == 0);
}

}  // namespace zero
