// The run-time device choice: CUDA only when the runtime reports a GPU, else the CPU.
#include <catch2/catch.hpp>

#include "base/error.h"
#include "device/device.h"

namespace zero {

TEST_CASE("the automatic device is CUDA exactly when the probe finds a GPU", "[device][select]") {
  const CudaProbe probe = probe_cuda();
  auto device = create_device({});
  if (probe.device_count > 0) {
    REQUIRE(device->type() == DeviceType::cuda);
    REQUIRE(probe.reason.empty());
  } else {
    REQUIRE(device->type() == DeviceType::cpu);
    REQUIRE_FALSE(probe.reason.empty());  // says why: no driver, no device, or no CUDA build
  }
  REQUIRE(create_device({DevicePreference::cpu, 0})->type() == DeviceType::cpu);
}

TEST_CASE("asking for CUDA without a GPU is a device error giving the reason", "[device][select]") {
  const CudaProbe probe = probe_cuda();
  if (probe.device_count > 0) {
    REQUIRE(create_device({DevicePreference::cuda, 0})->type() == DeviceType::cuda);
    return;
  }
  try {
    create_device({DevicePreference::cuda, 0});
    FAIL("a CUDA device was created without a GPU");
  } catch (const Error& error) {
    REQUIRE(error.category() == ErrorCategory::device);
    REQUIRE(std::string(error.what()) ==
            "a CUDA device was asked for but none is usable: " + probe.reason);
  }
}

}  // namespace zero
