// One rank of the local communicator on the asynchronous CPU device, with an Agreement over it:
// what the engine's parts that talk to other ranks need, for their tests alone.
#pragma once

#include <chrono>
#include <memory>

#include "comm/backends.h"
#include "device/device.h"
#include "engine/collectives/agreement.h"

namespace zero::engine::testing {

struct OneRank {
  OneRank() : device(create_cpu_device(CpuDeviceMode::async)) {
    comm::CommOptions options;
    options.device = device.get();
    options.timeout = std::chrono::seconds(30);
    comm = comm::make_local_communicator(options);
    agreement = Agreement(*comm, *device);
  }
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  Agreement agreement;
};

}  // namespace zero::engine::testing
