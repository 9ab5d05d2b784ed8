// The asynchronous CPU device (CpuDeviceMode::async and guarded): each stream is a worker
// thread running its work in submission order, events are markers in those queues, and copies
// and kernels are enqueued like a GPU's, so the CPU shows the ordering mistakes a GPU would.
// The guarded mode keeps device-tier memory in GuardedMemory: the work enqueued here reaches
// it through the backing mapping, host code through the window only while unguarded. The timed
// mode (a LinkClock) makes each copy and kernel last as long as on a GPU and traces them.
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "device/cpu/guarded_memory.h"
#include "device/cpu/link_clock.h"
#include "device/cpu/stream_worker.h"
#include "device/device.h"
#include "device/host_kernels.h"
#include "device/host_memory.h"

namespace zero {
namespace {

class AsyncCpuStream final : public Stream {
 public:
  // `on_destroy`: called first in the destructor (the device forgets the stream).
  // `raised`: its thread at a raised priority (the timed mode's GPU, StreamWorker).
  explicit AsyncCpuStream(std::string lane, bool raised,
                          std::function<void(AsyncCpuStream*)> on_destroy = nullptr)
      : lane_(std::move(lane)), on_destroy_(std::move(on_destroy)), worker_(raised) {}
  ~AsyncCpuStream() override {
    if (on_destroy_) on_destroy_(this);
  }
  void synchronize() override { worker_.drain(); }
  void* native() const noexcept override { return nullptr; }
  void submit(std::function<void()> task) { worker_.submit(std::move(task)); }
  const std::string& lane() const noexcept { return lane_; }

 private:
  std::string lane_;  // its name in a trace
  std::function<void(AsyncCpuStream*)> on_destroy_;
  cpu::StreamWorker worker_;  // last: its thread finishes the queue before the rest goes
};

// The calling thread as a stream (wrap_stream(NULL)): its work is done when it calls, and it
// waits on the host for what it is made to wait for.
class HostStream final : public Stream {
 public:
  void synchronize() override {}
  void* native() const noexcept override { return nullptr; }
};

AsyncCpuStream& async_stream(Stream& stream) {
  auto* mine = dynamic_cast<AsyncCpuStream*>(&stream);
  if (mine == nullptr) {
    throw Error(ErrorCategory::usage,
                "the asynchronous CPU device was given a stream it did not create");
  }
  return *mine;
}

class AsyncCpuEvent final : public Event {
 public:
  void record(Stream& stream) override {
    auto marker = std::make_shared<Marker>();
    const auto reach = [marker] {
      marker->time = std::chrono::steady_clock::now();
      marker->reached.set();
    };
    if (dynamic_cast<HostStream*>(&stream) != nullptr) {
      reach();
    } else {
      async_stream(stream).submit(reach);
    }
    marker_ = std::move(marker);
  }
  // Like cudaStreamWaitEvent: waits for the work captured by the latest record, if any.
  void block(Stream& stream) override {
    if (!marker_) return;
    if (dynamic_cast<HostStream*>(&stream) != nullptr) {
      marker_->reached.wait();
      return;
    }
    async_stream(stream).submit([marker = marker_] { marker->reached.wait(); });
  }
  bool query() override { return !marker_ || marker_->reached.is_set(); }
  void synchronize() override {
    if (marker_) marker_->reached.wait();
  }
  float elapsed_ms_since(Event& start) override {
    auto* begin = dynamic_cast<AsyncCpuEvent*>(&start);
    if (begin == nullptr || !begin->marker_ || !marker_) {
      throw Error(ErrorCategory::usage,
                  "elapsed_ms_since: both events must be recorded events of the CPU device");
    }
    synchronize();
    begin->synchronize();
    return std::chrono::duration<float, std::milli>(marker_->time - begin->marker_->time).count();
  }

 private:
  struct Marker {
    cpu::Marker reached;
    std::chrono::steady_clock::time_point time{};
  };
  std::shared_ptr<Marker> marker_;
};

class AsyncCpuDevice final : public Device {
 public:
  // `clock`: the timed mode's (null: copies and kernels take what they take here).
  AsyncCpuDevice(bool guarded, std::unique_ptr<cpu::LinkClock> clock)
      : guarded_(guarded), clock_(std::move(clock)) {
    default_stream_ = std::make_unique<AsyncCpuStream>("default", clock_ != nullptr);
    streams_.push_back(default_stream_.get());
  }

  ~AsyncCpuDevice() override { drain_quietly(); }

  DeviceType type() const noexcept override { return DeviceType::cpu; }
  int ordinal() const noexcept override { return -1; }
  std::string description() const override {
    if (clock_) return "cpu (asynchronous, timed as a GPU behind a simulated link)";
    return guarded_ ? "cpu (asynchronous, guarded device memory)" : "cpu (asynchronous)";
  }
  // As a GPU's: the offloaded state is stepped by a synchronous CPU device beside this one.
  bool offload_beside() const noexcept override { return true; }

  void* reserve(Tier tier, std::size_t bytes) override {
    void* base = reserve_untimed(tier, bytes);
    if (clock_) clock_->reserved(base, bytes, tier);
    return base;
  }

  // Like cudaFree, waits for the work queued so far: it may still use the memory.
  void unreserve(Tier tier, void* base, std::size_t bytes) noexcept override {
    drain_quietly();
    if (clock_) clock_->unreserved(base);
    if (tier == Tier::pinned) {
      host_memory::unmap_pinned(base, bytes);
    } else if (tier == Tier::device && guarded_) {
      memory_.unreserve(base, bytes);
    } else {
      host_memory::unmap(base, bytes);
    }
  }

  bool host_addressable(Tier tier) const noexcept override {
    return !(guarded_ && tier == Tier::device);
  }

  void launch_host_task(Stream& stream, std::function<void()> task) override {
    AsyncCpuStream& on = async_stream(stream);
    if (!clock_) {
      on.submit(std::move(task));
      return;
    }
    on.submit([this, &lane = on.lane(), task = std::move(task)] { clock_->run_host(lane, task); });
  }
  Trace* trace() noexcept override { return clock_ ? &clock_->trace() : nullptr; }
  void* host_alias(const void* pointer) override { return at(pointer); }
  void guard_device_memory(bool guarded) noexcept override {
    if (guarded_) memory_.guard(guarded);
  }

  Stream& default_stream() override { return *default_stream_; }

  std::unique_ptr<Stream> create_stream() override {
    std::lock_guard lock(mutex_);
    auto stream = std::make_unique<AsyncCpuStream>("stream " + std::to_string(++streams_made_),
                                                   clock_ != nullptr, [this](AsyncCpuStream* gone) {
                                                     std::lock_guard lock(mutex_);
                                                     std::erase(streams_, gone);
                                                   });
    streams_.push_back(stream.get());
    return stream;
  }

  std::unique_ptr<Stream> wrap_stream(void* native) override {
    if (native != nullptr) {
      throw Error(ErrorCategory::usage,
                  "a stream was passed to the engine on the CPU device: pass NULL, the calling "
                  "thread is the CPU caller's stream");
    }
    return std::make_unique<HostStream>();
  }

  std::unique_ptr<Event> create_event(bool) override { return std::make_unique<AsyncCpuEvent>(); }

  void synchronize() override {
    std::vector<AsyncCpuStream*> streams;
    {
      std::lock_guard lock(mutex_);
      streams = streams_;
    }
    for (AsyncCpuStream* stream : streams) stream->synchronize();
  }

  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    copy_async(dst, src, bytes, *default_stream_);
    default_stream_->synchronize();
  }

  void copy_async(void* dst, const void* src, std::size_t bytes, Stream& stream) override {
    if (bytes == 0) return;
    void* to = at(dst);
    const void* from = at(src);
    enqueue(stream, clock_ ? clock_->copy(dst, src, bytes) : cpu::LinkClock::Cost{},
            [=] { std::memmove(to, from, bytes); });
  }

  void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
            Stream& stream) override {
    const void* from = at(src);
    void* to = at(dst);
    enqueue(stream, kernel_cost(count * (dtype_size(src_dtype) + dtype_size(dst_dtype))),
            [=] { host::cast(from, src_dtype, to, dst_dtype, count); });
  }
  void scale(void* data, DType dtype, std::size_t count, float factor, Stream& stream) override {
    void* p = at(data);
    enqueue(stream, kernel_cost(2 * count * dtype_size(dtype)),
            [=] { host::scale(p, dtype, count, factor); });
  }
  void accumulate(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
                  float factor, Stream& stream) override {
    const void* from = at(src);
    void* to = at(dst);
    enqueue(stream, kernel_cost(count * (dtype_size(src_dtype) + 2 * dtype_size(dst_dtype))),
            [=] { host::accumulate(from, src_dtype, to, dst_dtype, count, factor); });
  }
  void accumulate_onto_zero(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                            std::size_t count, float factor, Stream& stream) override {
    const void* from = at(src);
    void* to = at(dst);
    enqueue(stream, kernel_cost(count * (dtype_size(src_dtype) + dtype_size(dst_dtype))),
            [=] { host::accumulate_onto_zero(from, src_dtype, to, dst_dtype, count, factor); });
  }
  void fill(void* data, DType dtype, std::size_t count, float value, Stream& stream) override {
    void* p = at(data);
    enqueue(stream, kernel_cost(count * dtype_size(dtype)),
            [=] { host::fill(p, dtype, count, value); });
  }
  void sum_squares(const void* data, DType dtype, std::size_t count, float* accumulator,
                   Stream& stream) override {
    const void* p = at(data);
    auto* sum = static_cast<float*>(at(accumulator));
    enqueue(stream, kernel_cost(count * dtype_size(dtype)),
            [=] { *sum = static_cast<float>(*sum + host::sum_squares(p, dtype, count)); });
  }
  void check_finite(const void* data, DType dtype, std::size_t count, float* flag,
                    Stream& stream) override {
    const void* p = at(data);
    auto* out = static_cast<float*>(at(flag));
    enqueue(stream, kernel_cost(count * dtype_size(dtype)), [=] {
      if (host::any_nonfinite(p, dtype, count)) *out = 1.0f;
    });
  }
  void quantize(const void* src, DType dtype, std::size_t count, std::size_t parts, void* packed,
                Stream& stream) override {
    const void* from = at(src);
    void* to = at(packed);
    enqueue(stream, kernel_cost(count * parts * (dtype_size(dtype) + 1)),
            [=] { host::quantize(from, dtype, count, parts, to); });
  }
  void dequantize(const void* packed, std::size_t count, std::size_t parts, void* dst, DType dtype,
                  Stream& stream) override {
    const void* from = at(packed);
    void* to = at(dst);
    enqueue(stream, kernel_cost(count * parts * (dtype_size(dtype) + 1)),
            [=] { host::dequantize(from, count, parts, to, dtype); });
  }
  void dequantize_sum(const void* packed, std::size_t count, std::size_t parts, void* dst,
                      DType dtype, Stream& stream) override {
    const void* from = at(packed);
    void* to = at(dst);
    enqueue(stream, kernel_cost(count * (parts + dtype_size(dtype))),
            [=] { host::dequantize_sum(from, count, parts, to, dtype); });
  }

 private:
  void* reserve_untimed(Tier tier, std::size_t bytes) {
    switch (tier) {
      case Tier::pinned:
        return host_memory::map_pinned(bytes);
      case Tier::device:
        return guarded_ ? memory_.reserve(bytes) : host_memory::map(bytes, tier);
      case Tier::host:
        return host_memory::map(bytes, tier);
      case Tier::nvme:
        break;
    }
    throw Error(ErrorCategory::usage,
                "Device::reserve: the nvme tier is file space, not memory; use an nvme arena");
  }

  cpu::LinkClock::Cost kernel_cost(std::size_t bytes) const {
    return clock_ ? clock_->kernel(bytes) : cpu::LinkClock::Cost{};
  }
  // `work` on `stream`'s thread, timed by the clock where there is one.
  void enqueue(Stream& stream, const cpu::LinkClock::Cost& cost, std::function<void()> work) {
    AsyncCpuStream& on = async_stream(stream);
    if (!clock_) {
      on.submit(std::move(work));
      return;
    }
    if (!clock_->moves_data()) work = [] {};  // timing only
    on.submit(
        [this, &lane = on.lane(), cost, work = std::move(work)] { clock_->run(lane, cost, work); });
  }

  void drain_quietly() noexcept {
    try {
      synchronize();
    } catch (...) {  // a task's error nobody synchronised for; the work is done all the same
    }
  }

  void* at(const void* pointer) const noexcept {
    return guarded_ ? memory_.translate(pointer) : const_cast<void*>(pointer);
  }

  bool guarded_;
  std::unique_ptr<cpu::LinkClock> clock_;
  mutable cpu::GuardedMemory memory_;
  std::mutex mutex_;
  std::unique_ptr<AsyncCpuStream> default_stream_;
  std::vector<AsyncCpuStream*> streams_;
  int streams_made_ = 1;  // the default stream is the first
};

}  // namespace

std::unique_ptr<Device> create_async_cpu_device(bool guarded) {
  return std::make_unique<AsyncCpuDevice>(guarded, nullptr);
}

std::unique_ptr<Device> create_timed_cpu_device(const SimulatedLink& link) {
  return std::make_unique<AsyncCpuDevice>(false, std::make_unique<cpu::LinkClock>(link));
}

}  // namespace zero
