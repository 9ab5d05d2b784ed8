// The Device interface: raw memory reservations per tier (which arenas carve up), streams and
// events, synchronous and asynchronous copies, and the small kernels the engine needs.
//
// Ordering: work submitted to one Stream runs in submission order. Work on different streams
// is ordered only by events (Event::record on the producer, Event::block on the consumer),
// never by host synchronisation. The synchronous CPU device runs every call to completion on
// the calling thread, so its streams and events are trivially ordered; the asynchronous one
// (CpuDeviceMode::async) runs each stream on a worker thread, so that every ordering mistake
// a GPU would expose appears on the CPU, and the guarded one also makes host access to
// device-tier memory fault while the engine runs (guard_device_memory).
//
// Kernels take pointers the device can address: device-tier memory (and, on CUDA, pinned
// memory through unified addressing). They are asynchronous on the given stream; their scalar
// outputs (sum of squares, non-finite flag) stay in memory the device can write, so the
// engine can reduce them across ranks without a host round trip.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/dtype.h"
#include "device/memory.h"

namespace zero {

class Trace;

class Stream {
 public:
  virtual ~Stream() = default;
  // Blocks the calling thread until all work submitted to this stream has finished.
  virtual void synchronize() = 0;
  // The backend's handle (cudaStream_t for CUDA), or nullptr on the CPU device.
  virtual void* native() const noexcept = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  // Captures the work submitted to `stream` so far.
  virtual void record(Stream& stream) = 0;
  // Makes later work on `stream` wait for the captured work (no host synchronisation).
  virtual void block(Stream& stream) = 0;
  // True when the captured work has finished.
  virtual bool query() = 0;
  virtual void synchronize() = 0;
  // Milliseconds between `start` (recorded earlier) and this event; both must be timing events.
  virtual float elapsed_ms_since(Event& start) = 0;
};

enum class DeviceType { cpu, cuda };

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceType type() const noexcept = 0;
  // The GPU's index as the CUDA runtime numbers it; -1 for the CPU.
  virtual int ordinal() const noexcept = 0;
  // Human-readable: "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GiB)".
  virtual std::string description() const = 0;

  // Reserves `bytes` of memory in `tier` (device, pinned or host; never nvme), aligned to at
  // least 4096 bytes. Meant for the few large reservations arenas make at init, not for the
  // hot path. Throws an out_of_memory Error naming the tier and size. Zero bytes gives nullptr.
  virtual void* reserve(Tier tier, std::size_t bytes) = 0;
  virtual void unreserve(Tier tier, void* base, std::size_t bytes) noexcept = 0;

  virtual Stream& default_stream() = 0;
  virtual std::unique_ptr<Stream> create_stream() = 0;
  // The caller's stream as a Stream, borrowed (never destroyed by it): on CUDA a cudaStream_t
  // of this device's GPU, NULL for the legacy default stream; on the CPU NULL only, for the
  // calling thread itself, whose work is done when it calls and which waits on the host for
  // what it is made to wait for (Event::block). Throws a usage Error for another device's
  // stream or a non-NULL stream on the CPU.
  virtual std::unique_ptr<Stream> wrap_stream(void* native) = 0;
  virtual std::unique_ptr<Event> create_event(bool timing = false) = 0;
  // Waits for all work on all streams of this device.
  virtual void synchronize() = 0;

  // Whether the engine's offloaded state (pinned and host memory) is computed on by a CPU
  // device of its own beside this one, with its own stream, as the host beside a GPU: true on
  // CUDA, and on the asynchronous and guarded CPU devices, which stand in for a GPU so that
  // the CPU tests take the engine's GPU branches (and find their ordering mistakes). False on
  // the synchronous CPU device, which is that host device itself.
  virtual bool offload_beside() const noexcept = 0;

  // The memory of the device tier where it is the device's own (a GPU's): free and total bytes
  // now, and a name for the GPU that is the same in every process on the machine. nullopt
  // where the device tier is host memory (the CPU devices).
  struct OwnMemory {
    std::uint64_t free = 0;
    std::uint64_t total = 0;
    std::string id;
  };
  virtual std::optional<OwnMemory> own_memory() const { return std::nullopt; }

  // Whether host code may read and write memory of `tier` directly (device-tier memory is not
  // host-addressable on CUDA or on the guarded CPU device; pinned and host memory always are).
  virtual bool host_addressable(Tier tier) const noexcept = 0;

  // Runs `task` on the host in `stream`'s order: after the work submitted there before it,
  // before the work submitted after it (CUDA: cudaLaunchHostFunc, so the task must not call
  // CUDA; CPU: on the stream's thread). The task must not throw.
  virtual void launch_host_task(Stream& stream, std::function<void()> task) = 0;
  // The address at which a host task reaches `pointer` (memory of this device): the pointer
  // itself wherever the host addresses the memory. The guarded CPU device gives its device-tier
  // memory's other mapping; CUDA device memory has none (a usage Error).
  virtual void* host_alias(const void* pointer) = 0;
  // The guarded CPU device only: while guarded (calls nest), host code touching device-tier
  // memory faults with a message naming the address; device work reaches it through its own
  // mapping. The engine guards every call it makes into the device. No effect elsewhere.
  virtual void guard_device_memory(bool guarded) noexcept { (void)guarded; }
  // The timed CPU device's trace of its copies and kernels, where the engine also records its
  // host work beside them (device/trace.h); null on every other device.
  virtual Trace* trace() noexcept { return nullptr; }

  // Copies between any two of device, pinned and host memory. Synchronous: ordered after the
  // work on the default stream, complete on return.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_async(void* dst, const void* src, std::size_t bytes, Stream& stream) = 0;

  // dst[i] = convert(src[i]) between f32, f16 and bf16, rounding to nearest even (base/half.h).
  // src and dst must not overlap unless they are the same pointer with the same dtype.
  virtual void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
                    Stream& stream) = 0;
  // data[i] = round(float(data[i]) * factor), computed in fp32.
  virtual void scale(void* data, DType dtype, std::size_t count, float factor, Stream& stream) = 0;
  // dst[i] = round(float(dst[i]) + float(src[i]) * factor): one fp32 multiplication, then one
  // fp32 addition (never contracted into an fma), rounded once to dst's dtype. The engine adds
  // a reduced gradient block into the owned gradient shard with it. src and dst must not
  // overlap.
  virtual void accumulate(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                          std::size_t count, float factor, Stream& stream) = 0;
  // accumulate() into a dst of zeros without reading it: dst[i] = round(0.0f + float(src[i]) *
  // factor), the bits accumulate() gives after fill(dst, 0) (a -0 product becomes +0). The first
  // reduction after a step writes the owned gradient shard with it instead of zeroing it first.
  // This default does exactly that, fill then accumulate; the CPU devices write in one pass.
  virtual void accumulate_onto_zero(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                                    std::size_t count, float factor, Stream& stream) {
    fill(dst, dst_dtype, count, 0.0f, stream);
    accumulate(src, src_dtype, dst, dst_dtype, count, factor, stream);
  }
  // data[i] = round(value).
  virtual void fill(void* data, DType dtype, std::size_t count, float value, Stream& stream) = 0;
  // *accumulator += sum of float(data[i])^2, accumulated in double where the backend can.
  virtual void sum_squares(const void* data, DType dtype, std::size_t count, float* accumulator,
                           Stream& stream) = 0;
  // Sets *flag = 1.0f when any element is NaN or infinite; leaves it unchanged otherwise.
  virtual void check_finite(const void* data, DType dtype, std::size_t count, float* flag,
                            Stream& stream) = 0;

  // Block int8 quantization (base/block_quant.h), ZeRO++'s weights and gradients on the wire,
  // bit for bit as device/reference.h on every backend (NaN payloads aside). `parts` chunks of
  // `count` values each: source chunk k at element k * count, packed chunk k at byte
  // k * block_quant_bytes(count) (packed must be 4-byte aligned).
  virtual void quantize(const void* src, DType dtype, std::size_t count, std::size_t parts,
                        void* packed, Stream& stream) = 0;
  // Destination chunk k (at element k * count) = packed chunk k dequantized.
  virtual void dequantize(const void* packed, std::size_t count, std::size_t parts, void* dst,
                          DType dtype, Stream& stream) = 0;
  // dst[i] = round(the fp32 sum over chunks k = 0, 1, ... in order of packed chunk k's value i
  // dequantized), unfused: a quantized reduce-scatter's receiving end.
  virtual void dequantize_sum(const void* packed, std::size_t count, std::size_t parts, void* dst,
                              DType dtype, Stream& stream) = 0;
};

// While alive, host access to the device's device-tier memory faults (guard_device_memory).
class DeviceMemoryGuard {
 public:
  explicit DeviceMemoryGuard(Device& device) noexcept : device_(device) {
    device_.guard_device_memory(true);
  }
  ~DeviceMemoryGuard() { device_.guard_device_memory(false); }
  DeviceMemoryGuard(const DeviceMemoryGuard&) = delete;
  DeviceMemoryGuard& operator=(const DeviceMemoryGuard&) = delete;

 private:
  Device& device_;
};

enum class DevicePreference { automatic, cpu, cuda };

// How the CPU device runs its streams: sync (every call completes on the calling thread),
// async (a worker thread per stream, events as markers in the queues), guarded (async, and
// device-tier memory faults on host access while the engine runs) or timed (async, and every
// copy and kernel lasts as long as on a GPU behind the SimulatedLink). Testing modes: async
// and guarded catch on the CPU the ordering and host-access mistakes a GPU would expose; timed
// runs the engine's GPU schedule in a GPU's time, so that it can be timed without one.
enum class CpuDeviceMode { sync, async, guarded, timed };

// The timed CPU device's GPU: what a copy between host and device memory and a kernel take.
// The defaults are an H100's behind PCIe 5 x16 as measured (not as rated).
struct SimulatedLink {
  double h2d_gbps = 50.0;     // host to device, pinned host memory, GB/s
  double d2h_gbps = 50.0;     // device to host
  double pageable = 0.5;      // pageable host memory's share of the pinned rate
  double kernel_gbps = 2500;  // device memory: a kernel's bytes read and written per second
  double latency_us = 5.0;    // each copy's and kernel's launch
  // false: copies and kernels take their time and do nothing, so that the host's cores are
  // left to the host's work as beside a GPU (a benchmark's timing run; values are garbage).
  bool move_data = true;
};

// ZERO_CPU_DEVICE: "sync", "async", "guarded" or "timed"; unset or empty: sync. Throws a
// usage Error naming the variable and the values for anything else.
CpuDeviceMode cpu_device_mode_from_env();
// ZERO_TIMED_LINK, comma-separated key=value pairs over SimulatedLink's defaults: h2d, d2h and
// kernel (GB/s), pageable (a fraction in (0, 1]), latency_us and data (1, or 0 for timing
// only: SimulatedLink::move_data), e.g. "h2d=25,d2h=25". Throws
// a usage Error naming the variable, the pair and the keys for anything else.
SimulatedLink simulated_link_from_env();
std::string_view cpu_device_mode_name(CpuDeviceMode mode) noexcept;

struct DeviceOptions {
  DeviceOptions(DevicePreference preference_ = DevicePreference::automatic, int local_rank_ = 0,
                std::optional<CpuDeviceMode> cpu_mode_ = std::nullopt)
      : preference(preference_), local_rank(local_rank_), cpu_mode(cpu_mode_) {}

  DevicePreference preference = DevicePreference::automatic;
  // The launcher's local rank; selects the GPU (local_rank modulo the GPU count).
  int local_rank = 0;
  // The CPU device's mode when the CPU is chosen; unset: cpu_device_mode_from_env().
  std::optional<CpuDeviceMode> cpu_mode;
};

// What the CUDA runtime reports: the number of GPUs, or why there are none.
struct CudaProbe {
  int device_count = 0;
  std::string reason;  // empty when device_count > 0
};

// Never throws. A build without CUDA reports "built without CUDA".
CudaProbe probe_cuda() noexcept;

// automatic: CUDA when probe_cuda() finds a GPU, else the CPU device (logged at info).
// cuda: a GPU or a device Error saying why there is none.
std::unique_ptr<Device> create_device(const DeviceOptions& options = {});
// The synchronous CPU device (the host side of the engine beside a GPU, tools, tests).
std::unique_ptr<Device> create_cpu_device();
std::unique_ptr<Device> create_cpu_device(CpuDeviceMode mode);
// The timed CPU device with `link` (CpuDeviceMode::timed reads ZERO_TIMED_LINK).
std::unique_ptr<Device> create_timed_cpu_device(const SimulatedLink& link);
// Implemented by the CUDA backend target (or its stub when CUDA is not built).
std::unique_ptr<Device> create_cuda_device(int ordinal);

}  // namespace zero
