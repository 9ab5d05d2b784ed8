// Chooses the device at run time: CUDA when the runtime reports a GPU, else the CPU.
#include "base/error.h"
#include "base/log.h"
#include "device/device.h"

namespace zero {

std::unique_ptr<Device> create_device(const DeviceOptions& options) {
  const auto cpu = [&] {
    return create_cpu_device(options.cpu_mode ? *options.cpu_mode : cpu_device_mode_from_env());
  };
  const auto mode = [&] {
    return cpu_device_mode_name(options.cpu_mode ? *options.cpu_mode : cpu_device_mode_from_env());
  };
  if (options.preference == DevicePreference::cpu) {
    log::info("using the CPU device ({}), as asked", mode());
    return cpu();
  }
  const CudaProbe probe = probe_cuda();
  if (probe.device_count > 0) {
    const int ordinal = options.local_rank % probe.device_count;
    return create_cuda_device(ordinal < 0 ? 0 : ordinal);
  }
  if (options.preference == DevicePreference::cuda) {
    throw make_error(ErrorCategory::device, "a CUDA device was asked for but none is usable: {}",
                     probe.reason);
  }
  log::info("no GPU ({}); using the CPU device ({})", probe.reason, mode());
  return cpu();
}

}  // namespace zero
