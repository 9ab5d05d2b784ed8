// The timed CPU device (CpuDeviceMode::timed): copies and kernels do what the asynchronous
// device's do and last at least what the SimulatedLink says; copies in one direction take the
// link one after another whatever their stream; every one is in the trace while it is enabled.
// Only lower bounds and orders are asserted (what the model guarantees), never a speed.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/prctl.h>

#include "base/error.h"
#include "device/device.h"
#include "device/trace.h"

namespace zero {
namespace {

constexpr std::size_t kBytes = 4u << 20;  // 4 MiB: 4 ms at 1 GB/s

SimulatedLink slow_link() {
  SimulatedLink link;
  link.h2d_gbps = 1.0;
  link.d2h_gbps = 1.0;
  link.pageable = 0.5;
  link.kernel_gbps = 1.0;
  link.latency_us = 0.0;
  return link;
}

double length(const Trace::Span& span) {
  return span.end_ms - span.begin_ms;
}

// At least `bytes` at `gbps`, in milliseconds (less a clock tick's rounding).
double at_least(std::size_t bytes, double gbps) {
  return 1e3 * static_cast<double>(bytes) / (gbps * 1e9) - 1e-5;
}

}  // namespace

TEST_CASE("the timed device's copies move the bytes and last bytes over the link's rate",
          "[device][timed]") {
  auto device = create_timed_cpu_device(slow_link());
  REQUIRE(device->trace() != nullptr);
  device->trace()->enable(true);
  auto* pinned = static_cast<unsigned char*>(device->reserve(Tier::pinned, kBytes));
  auto* gpu = static_cast<unsigned char*>(device->reserve(Tier::device, kBytes));
  std::vector<unsigned char> pageable(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) pinned[i] = static_cast<unsigned char>(i * 7 + 3);

  device->copy(gpu, pinned, kBytes);
  device->copy(pageable.data(), gpu, kBytes);
  REQUIRE(std::memcmp(pageable.data(), pinned, kBytes) == 0);
  device->fill(gpu, DType::f32, kBytes / 4, 0.0f, device->default_stream());
  device->synchronize();

  const std::vector<Trace::Span> spans = device->trace()->take();
  REQUIRE(spans.size() == 3);
  CHECK(spans[0].name == "h2d");
  CHECK(spans[0].lane == "default");
  CHECK(spans[0].bytes == kBytes);
  CHECK(length(spans[0]) >= at_least(kBytes, 1.0));
  CHECK(spans[1].name == "d2h");  // into pageable memory: at half the rate
  CHECK(length(spans[1]) >= at_least(kBytes, 0.5));
  CHECK(spans[2].name == "kernel");
  CHECK(length(spans[2]) >= at_least(kBytes, 1.0));
  CHECK(device->trace()->take().empty());
  device->unreserve(Tier::pinned, pinned, kBytes);
  device->unreserve(Tier::device, gpu, kBytes);
}

TEST_CASE("the timed device's copies in one direction share the link across streams",
          "[device][timed]") {
  auto device = create_timed_cpu_device(slow_link());
  device->trace()->enable(true);
  void* pinned = device->reserve(Tier::pinned, 2 * kBytes);
  void* gpu = device->reserve(Tier::device, 2 * kBytes);
  auto first = device->create_stream();
  auto second = device->create_stream();
  device->copy_async(gpu, pinned, kBytes, *first);
  device->copy_async(static_cast<char*>(gpu) + kBytes, static_cast<char*>(pinned) + kBytes, kBytes,
                     *second);
  device->synchronize();
  std::vector<Trace::Span> spans = device->trace()->take();
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].lane != spans[1].lane);
  if (spans[0].begin_ms > spans[1].begin_ms) std::swap(spans[0], spans[1]);
  CHECK(spans[1].begin_ms >= spans[0].end_ms - 1e-5);  // one after the other on the link

  device->trace()->enable(false);
  device->copy(gpu, pinned, kBytes);
  CHECK(device->trace()->take().empty());
  device->unreserve(Tier::pinned, pinned, 2 * kBytes);
  device->unreserve(Tier::device, gpu, 2 * kBytes);
}

TEST_CASE("the timed device's streams sleep without the timer slack", "[device][timed]") {
  // Linux lets a sleep overrun by the thread's timer slack, 50 us by default: on each timed
  // copy and kernel, and on each task of a bench's compute stand-in. The streams stand for a
  // GPU, whose work ends when its length is up.
  const auto slack = [] { return prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL); };
  auto device = create_timed_cpu_device(slow_link());
  auto stream = device->create_stream();
  int on_default = -1;
  int on_created = -1;
  device->launch_host_task(device->default_stream(), [&] { on_default = slack(); });
  device->launch_host_task(*stream, [&] { on_created = slack(); });
  device->synchronize();
  CHECK(on_default == 1);
  CHECK(on_created == 1);
  CHECK(slack() != 1);  // the caller's own thread keeps the process's
}

TEST_CASE("ZERO_TIMED_LINK sets the simulated link and refuses what it cannot read",
          "[device][timed]") {
  ::setenv("ZERO_TIMED_LINK", "h2d=12.5,d2h=20,pageable=0.25,latency_us=0", 1);
  const SimulatedLink link = simulated_link_from_env();
  CHECK(link.h2d_gbps == 12.5);
  CHECK(link.d2h_gbps == 20.0);
  CHECK(link.pageable == 0.25);
  CHECK(link.latency_us == 0.0);
  CHECK(link.kernel_gbps == SimulatedLink{}.kernel_gbps);
  ::setenv("ZERO_TIMED_LINK", "data=0", 1);
  CHECK_FALSE(simulated_link_from_env().move_data);
  for (const char* bad :
       {"h2d", "h2d=fast", "h2d=-1", "pcie=10", "pageable=2", "kernel=0", "data=2"}) {
    ::setenv("ZERO_TIMED_LINK", bad, 1);
    try {
      simulated_link_from_env();
      FAIL("ZERO_TIMED_LINK=" << bad << " was accepted");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::usage);
      CHECK_THAT(error.what(), Catch::Contains("ZERO_TIMED_LINK") && Catch::Contains(bad));
    }
  }
  ::setenv("ZERO_CPU_DEVICE", "timed", 1);
  ::unsetenv("ZERO_TIMED_LINK");
  CHECK(cpu_device_mode_from_env() == CpuDeviceMode::timed);
  CHECK(create_cpu_device(CpuDeviceMode::timed)->trace() != nullptr);
  CHECK(create_cpu_device(CpuDeviceMode::async)->trace() == nullptr);
  ::unsetenv("ZERO_CPU_DEVICE");
}

}  // namespace zero
