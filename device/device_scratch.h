// Device memory taken for one collective or copy and given back on every path (a small
// reservation outside the arenas, for work that is not part of the model state).
#pragma once

#include <algorithm>
#include <cstddef>

#include "device/device.h"

namespace zero {

class DeviceScratch {
 public:
  DeviceScratch(Device& device, std::size_t bytes)
      : device_(device),
        bytes_(std::max<std::size_t>(bytes, 8)),
        data_(device.reserve(Tier::device, bytes_)) {}
  ~DeviceScratch() { device_.unreserve(Tier::device, data_, bytes_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  char* data() const noexcept { return static_cast<char*>(data_); }

 private:
  Device& device_;
  std::size_t bytes_;
  void* data_;
};

}  // namespace zero
