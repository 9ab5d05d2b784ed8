// DeviceSpans (engine/stepping/device_spans.h) on the asynchronous CPU device, whose streams run
// on their own threads as a GPU's do: a span's time is the device's, not the host's queuing; a
// span still running is left for a later call; beyond kSpans in flight the oldest is taken.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "device/device.h"
#include "engine/stepping/device_spans.h"
#include "tests/stream_hold.h"

namespace zero::engine {
namespace {

// Work of `ms` on `stream`, which the host does not wait for.
void busy(Device& device, Stream& stream, int ms) {
  device.launch_host_task(stream,
                          [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
}

}  // namespace

TEST_CASE("device spans time the stream's work, not the host's, and wait for nothing unasked",
          "[engine]") {
  auto device = create_cpu_device(CpuDeviceMode::async);
  auto stream = device->create_stream();
  DeviceSpans spans(*device);
  // A span held open on the device until the host releases it (or it gives up after 10 s).
  spans.begin(*stream);
  zero::testing::StreamHold hold(*device, *stream);
  spans.end(*stream);
  CHECK(spans.take_finished() == 0.0);  // still running: left for later, not waited for
  hold.release();
  CHECK(spans.take_finished(/*wait=*/true) > 0.0);
  CHECK_FALSE(hold.gave_up());                       // the calls above did not wait for it
  CHECK(spans.take_finished(/*wait=*/true) == 0.0);  // taken once

  // More spans than it holds in flight: the oldest is taken to make room, and counted.
  for (std::size_t i = 0; i < DeviceSpans::kSpans + 2; ++i) {
    spans.begin(*stream);
    busy(*device, *stream, 1);
    spans.end(*stream);
  }
  CHECK(spans.take_finished(/*wait=*/true) > 0.0);
  CHECK(spans.take_finished(/*wait=*/true) == 0.0);
  CHECK_THROWS(spans.end(*stream));  // no span open
  device->synchronize();
}

}  // namespace zero::engine
