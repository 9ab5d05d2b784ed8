// What every part of the engine reads and calls, fixed at init: the config, the registration,
// the layout (memory_plan.h) and the two services, the device and the communicator. Parts keep
// a copy (references only); none of them writes through it. Internal to engine/.
#pragma once

#include "comm/communicator.h"
#include "device/device.h"
#include "engine/config/config.h"
#include "engine/memory_plan.h"
#include "engine/registry.h"

namespace zero::engine {

struct EngineContext {
  const config::Config& config;
  const Registry& registry;
  const Layout& layout;
  Device& device;
  Communicator& comm;
};

}  // namespace zero::engine
