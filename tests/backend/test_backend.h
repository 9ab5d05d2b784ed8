// The device backend a shared test file runs against: the unit-test program links the CPU
// backend, the [gpu] program the CUDA one, so the same test cases check both.
#pragma once

#include <memory>

#include "device/device.h"

namespace zero::test {

// The device under test.
std::unique_ptr<Device> make_test_device();

// Memory the device's kernels can address (device tier), and copies to and from the host.
struct DeviceBuffer {
  DeviceBuffer(Device& device, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes);
  void* data() const { return ptr; }

  Device& device;
  std::size_t size;
  void* ptr;
};

}  // namespace zero::test

// The tag of the backend's test cases: "[cpu]" or "[gpu]".
#ifndef ZERO_TEST_BACKEND_TAG
#define ZERO_TEST_BACKEND_TAG "[cpu]"
#endif
