// The synchronous CPU device: memory tiers are host mappings (pinned ones locked with mlock),
// streams and events are trivial because every call completes on the calling thread, and the
// kernels are device/host_kernels. Also the choice of CPU device mode (ZERO_CPU_DEVICE).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/error.h"
#include "device/device.h"
#include "device/host_kernels.h"
#include "device/host_memory.h"

namespace zero {
namespace {

class CpuStream final : public Stream {
 public:
  void synchronize() override {}
  void* native() const noexcept override { return nullptr; }
};

class CpuEvent final : public Event {
 public:
  void record(Stream&) override { time_ = std::chrono::steady_clock::now(); }
  void block(Stream&) override {}
  bool query() override { return true; }
  void synchronize() override {}
  float elapsed_ms_since(Event& start) override {
    auto* begin = dynamic_cast<CpuEvent*>(&start);
    if (begin == nullptr) {
      throw Error(ErrorCategory::usage, "elapsed_ms_since: the start event is not a CPU event");
    }
    return std::chrono::duration<float, std::milli>(time_ - begin->time_).count();
  }

 private:
  std::chrono::steady_clock::time_point time_{};
};

class CpuDevice final : public Device {
 public:
  DeviceType type() const noexcept override { return DeviceType::cpu; }
  int ordinal() const noexcept override { return -1; }
  std::string description() const override { return "cpu"; }
  bool offload_beside() const noexcept override { return false; }

  void* reserve(Tier tier, std::size_t bytes) override {
    switch (tier) {
      case Tier::pinned:
        return host_memory::map_pinned(bytes);
      case Tier::device:
      case Tier::host:
        return host_memory::map(bytes, tier);
      case Tier::nvme:
        break;
    }
    throw Error(ErrorCategory::usage,
                "Device::reserve: the nvme tier is file space, not memory; use an nvme arena");
  }

  void unreserve(Tier tier, void* base, std::size_t bytes) noexcept override {
    if (tier == Tier::pinned) {
      host_memory::unmap_pinned(base, bytes);
    } else {
      host_memory::unmap(base, bytes);
    }
  }

  bool host_addressable(Tier) const noexcept override { return true; }
  void launch_host_task(Stream&, std::function<void()> task) override { task(); }
  void* host_alias(const void* pointer) override { return const_cast<void*>(pointer); }

  Stream& default_stream() override { return stream_; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(); }
  std::unique_ptr<Stream> wrap_stream(void* native) override {
    if (native != nullptr) {
      throw Error(ErrorCategory::usage,
                  "a stream was passed to the engine on the CPU device: pass NULL, the calling "
                  "thread is the CPU caller's stream");
    }
    return std::make_unique<CpuStream>();
  }
  std::unique_ptr<Event> create_event(bool) override { return std::make_unique<CpuEvent>(); }
  void synchronize() override {}

  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes != 0) std::memmove(dst, src, bytes);
  }
  void copy_async(void* dst, const void* src, std::size_t bytes, Stream&) override {
    copy(dst, src, bytes);
  }

  void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
            Stream&) override {
    host::cast(src, src_dtype, dst, dst_dtype, count);
  }
  void scale(void* data, DType dtype, std::size_t count, float factor, Stream&) override {
    host::scale(data, dtype, count, factor);
  }
  void accumulate(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
                  float factor, Stream&) override {
    host::accumulate(src, src_dtype, dst, dst_dtype, count, factor);
  }
  void accumulate_onto_zero(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                            std::size_t count, float factor, Stream&) override {
    host::accumulate_onto_zero(src, src_dtype, dst, dst_dtype, count, factor);
  }
  void fill(void* data, DType dtype, std::size_t count, float value, Stream&) override {
    host::fill(data, dtype, count, value);
  }
  void sum_squares(const void* data, DType dtype, std::size_t count, float* accumulator,
                   Stream&) override {
    *accumulator = static_cast<float>(*accumulator + host::sum_squares(data, dtype, count));
  }
  void check_finite(const void* data, DType dtype, std::size_t count, float* flag,
                    Stream&) override {
    if (host::any_nonfinite(data, dtype, count)) *flag = 1.0f;
  }
  void quantize(const void* src, DType dtype, std::size_t count, std::size_t parts, void* packed,
                Stream&) override {
    host::quantize(src, dtype, count, parts, packed);
  }
  void dequantize(const void* packed, std::size_t count, std::size_t parts, void* dst, DType dtype,
                  Stream&) override {
    host::dequantize(packed, count, parts, dst, dtype);
  }
  void dequantize_sum(const void* packed, std::size_t count, std::size_t parts, void* dst,
                      DType dtype, Stream&) override {
    host::dequantize_sum(packed, count, parts, dst, dtype);
  }

 private:
  CpuStream stream_;
};

}  // namespace

std::unique_ptr<Device> create_async_cpu_device(bool guarded);  // async_cpu_device.cpp

std::unique_ptr<Device> create_cpu_device() {
  return std::make_unique<CpuDevice>();
}

std::unique_ptr<Device> create_cpu_device(CpuDeviceMode mode) {
  if (mode == CpuDeviceMode::sync) return create_cpu_device();
  if (mode == CpuDeviceMode::timed) return create_timed_cpu_device(simulated_link_from_env());
  return create_async_cpu_device(mode == CpuDeviceMode::guarded);
}

CpuDeviceMode cpu_device_mode_from_env() {
  const char* value = std::getenv("ZERO_CPU_DEVICE");
  const std::string text = value != nullptr ? value : "";
  if (text.empty() || text == "sync") return CpuDeviceMode::sync;
  if (text == "async") return CpuDeviceMode::async;
  if (text == "guarded") return CpuDeviceMode::guarded;
  if (text == "timed") return CpuDeviceMode::timed;
  throw make_error(ErrorCategory::usage,
                   "ZERO_CPU_DEVICE='{}' is not a CPU device mode; use sync (the default), async "
                   "(a worker thread per stream), guarded (async, and host access to device "
                   "memory faults while the engine runs) or timed (async, copies and kernels "
                   "take a GPU's time; ZERO_TIMED_LINK)",
                   text);
}

SimulatedLink simulated_link_from_env() {
  SimulatedLink link;
  const char* value = std::getenv("ZERO_TIMED_LINK");
  const std::string text = value != nullptr ? value : "";
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string pair = text.substr(at, comma - at);
    at = comma + 1;
    if (pair.empty()) continue;
    const std::size_t eq = pair.find('=');
    const std::string key = pair.substr(0, eq);
    if (key == "data" && (pair == "data=0" || pair == "data=1")) {
      link.move_data = pair == "data=1";
      continue;
    }
    double number = 0;
    bool ok = eq != std::string::npos;
    if (ok) {
      const std::string digits = pair.substr(eq + 1);
      char* end = nullptr;
      number = std::strtod(digits.c_str(), &end);
      ok = !digits.empty() && end == digits.c_str() + digits.size() &&
           (number > 0 || (number == 0 && key == "latency_us"));
    }
    double* field = key == "h2d"          ? &link.h2d_gbps
                    : key == "d2h"        ? &link.d2h_gbps
                    : key == "kernel"     ? &link.kernel_gbps
                    : key == "pageable"   ? &link.pageable
                    : key == "latency_us" ? &link.latency_us
                                          : nullptr;
    if (!ok || field == nullptr || (field == &link.pageable && number > 1.0)) {
      throw make_error(ErrorCategory::usage,
                       "ZERO_TIMED_LINK: '{}' is not key=value with a positive number (latency_us "
                       "may be 0); the keys "
                       "are h2d, d2h and kernel (GB/s), pageable (a fraction up to 1), "
                       "latency_us and data (0 or 1), e.g. ZERO_TIMED_LINK=h2d=25,d2h=25",
                       pair);
    }
    *field = number;
  }
  return link;
}

std::string_view cpu_device_mode_name(CpuDeviceMode mode) noexcept {
  switch (mode) {
    case CpuDeviceMode::sync:
      return "sync";
    case CpuDeviceMode::async:
      return "async";
    case CpuDeviceMode::guarded:
      return "guarded";
    case CpuDeviceMode::timed:
      return "timed";
  }
  return "sync";
}

}  // namespace zero
