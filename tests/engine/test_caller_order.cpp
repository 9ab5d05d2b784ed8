// CallerOrder alone (engine/hooks/caller_order.h), on the asynchronous CPU device: the caller's
// later work waits for what the engine queued (on the CPU the calling thread waits on the
// host), the engine's later work waits for the caller's, streams are wrapped once and the
// latest hook's stream is remembered.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "base/error.h"
#include "device/device.h"
#include "engine/hooks/caller_order.h"

namespace zero::engine {

TEST_CASE("caller order: the caller waits for the engine's queued work before going on",
          "[engine]") {
  auto device = create_cpu_device(CpuDeviceMode::async);
  CallerOrder order(*device);
  Stream& caller = order.caller(nullptr);  // the calling thread: the CPU caller's stream
  std::atomic<int> done{0};
  // The engine's work, slow and queued on its own stream.
  device->launch_host_task(device->default_stream(), [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    done = 1;
  });
  order.before(caller);
  CHECK(done == 1);
}

TEST_CASE("caller order: the engine's later work comes after the caller's", "[engine]") {
  auto device = create_cpu_device(CpuDeviceMode::async);
  CallerOrder order(*device);
  // A stream of the device standing for a caller that queues its work (as a GPU caller does).
  auto caller = device->create_stream();
  std::atomic<int> caller_done{0}, seen{-1};
  device->launch_host_task(*caller, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    caller_done = 1;
  });
  order.after(*caller);
  device->launch_host_task(device->default_stream(), [&] { seen = caller_done.load(); });
  device->default_stream().synchronize();
  CHECK(seen == 1);
}

TEST_CASE("caller order: the unnamed stream, the latest one, and wrapping", "[engine]") {
  auto device = create_cpu_device(CpuDeviceMode::async);
  CallerOrder order(*device);
  CHECK(order.wrap(nullptr) == nullptr);
  Stream& unnamed = order.caller(nullptr);
  CHECK(&order.latest() == &unnamed);
  CHECK(&order.caller(nullptr) == &unnamed);  // the same stream every time
  // On the CPU a caller's stream is always NULL: anything else is refused.
  int not_a_stream = 0;
  CHECK_THROWS_AS(order.wrap(&not_a_stream), Error);
}

}  // namespace zero::engine
