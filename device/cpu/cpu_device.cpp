// The CPU device: memory tiers are host mappings (pinned ones locked with mlock), streams and
// events are trivial because every call completes on the calling thread, and the kernels are
// device/cpu/cpu_kernels.
#include <chrono>
#include <cstring>

#include "base/error.h"
#include "device/cpu/cpu_kernels.h"
#include "device/device.h"
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

  void* reserve(Tier tier, std::size_t bytes) override {
    switch (tier) {
      case Tier::pinned: return host_memory::map_pinned(bytes);
      case Tier::device:
      case Tier::host: return host_memory::map(bytes, tier);
      case Tier::nvme: break;
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

  Stream& default_stream() override { return stream_; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(); }
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
    cpu::cast(src, src_dtype, dst, dst_dtype, count);
  }
  void scale(void* data, DType dtype, std::size_t count, float factor, Stream&) override {
    cpu::scale(data, dtype, count, factor);
  }
  void accumulate(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
                  float factor, Stream&) override {
    cpu::accumulate(src, src_dtype, dst, dst_dtype, count, factor);
  }
  void fill(void* data, DType dtype, std::size_t count, float value, Stream&) override {
    cpu::fill(data, dtype, count, value);
  }
  void sum_squares(const void* data, DType dtype, std::size_t count, float* accumulator,
                   Stream&) override {
    *accumulator = static_cast<float>(*accumulator + cpu::sum_squares(data, dtype, count));
  }
  void check_finite(const void* data, DType dtype, std::size_t count, float* flag,
                    Stream&) override {
    if (cpu::any_nonfinite(data, dtype, count)) *flag = 1.0f;
  }

 private:
  CpuStream stream_;
};

}  // namespace

std::unique_ptr<Device> create_cpu_device() { return std::make_unique<CpuDevice>(); }

}  // namespace zero
