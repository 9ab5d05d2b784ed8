// Chooses the device at run time: CUDA when the runtime reports a GPU, else the CPU.
#include <fmt/format.h>

#include "base/error.h"
#include "base/log.h"
#include "device/device.h"

namespace zero {

std::unique_ptr<Device> create_device(const DeviceOptions& options) {
  // The CPU's mode, from the options or ZERO_CPU_DEVICE: read once, used for the log line and
  // the device.
  const auto cpu = [&](const char* why) {
    const CpuDeviceMode mode = options.cpu_mode ? *options.cpu_mode : cpu_device_mode_from_env();
    log::info("{}; using the CPU device ({})", why, cpu_device_mode_name(mode));
    return create_cpu_device(mode);
  };
  if (options.preference == DevicePreference::cpu) return cpu("the CPU was asked for");
  const CudaProbe probe = probe_cuda();
  if (probe.device_count > 0) {
    const int ordinal = options.local_rank % probe.device_count;
    return create_cuda_device(ordinal < 0 ? 0 : ordinal);
  }
  if (options.preference == DevicePreference::cuda) {
    throw make_error(ErrorCategory::device, "a CUDA device was asked for but none is usable: {}",
                     probe.reason);
  }
  return cpu(fmt::format("no GPU ({})", probe.reason).c_str());
}

}  // namespace zero
