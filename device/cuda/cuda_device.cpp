// The CUDA device: device memory from cudaMalloc, pinned memory from cudaHostAlloc, host
// memory mapped like the CPU device's; non-blocking streams (the default stream too, never
// the legacy NULL stream), events, and the kernels of cuda_kernels.cu.
//
// Every public method first makes the device's GPU current on the calling thread, so a
// device may be used from any thread. Every CUDA call is checked; a failure is a device
// Error naming the call, the source location and the CUDA error.
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "base/error.h"
#include "device/cuda/cuda_kernels.h"
#include "device/device.h"
#include "device/host_memory.h"

namespace zero {
namespace {

// Clears the calling thread's last CUDA error, which a failed call leaves behind, so that
// the next launch check does not report it again.
void clear_last_error() noexcept {
  static_cast<void>(cudaGetLastError());
}

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line) {
  clear_last_error();
  throw make_error(ErrorCategory::device, "{} failed at {}:{}: {}: {}", call, file, line,
                   cudaGetErrorName(status), cudaGetErrorString(status));
}

#define ZERO_CUDA_CHECK(call)                                                 \
  do {                                                                        \
    const cudaError_t zero_cuda_status_ = (call);                             \
    if (zero_cuda_status_ != cudaSuccess) {                                   \
      ::zero::throw_cuda_error(zero_cuda_status_, #call, __FILE__, __LINE__); \
    }                                                                         \
  } while (0)

constexpr std::size_t kReserveAlignment = 4096;

[[noreturn]] void not_floating(DType dtype) {
  throw make_error(ErrorCategory::usage, "device kernels take fp32, fp16 or bf16, not {}",
                   dtype_name(dtype));
}

cuda::Format format_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return cuda::Format::f32;
    case DType::f16:
      return cuda::Format::f16;
    case DType::bf16:
      return cuda::Format::bf16;
    case DType::i64:
    case DType::u8:
      break;
  }
  not_floating(dtype);
}

// Kernels read whole elements: a pointer must be aligned to its element size.
void check_element_alignment(const void* data, DType dtype, const char* what) {
  if (reinterpret_cast<std::uintptr_t>(data) % dtype_size(dtype) != 0) {
    throw make_error(ErrorCategory::usage,
                     "device kernel {}: {} data at {} is not aligned to its {}-byte elements", what,
                     dtype_name(dtype), data, dtype_size(dtype));
  }
}

class CudaStream final : public Stream {
 public:
  explicit CudaStream(int ordinal) : ordinal_(ordinal), owned_(true) {
    ZERO_CUDA_CHECK(cudaSetDevice(ordinal));
    ZERO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    allocate_partials();
  }
  // The caller's stream, borrowed: never destroyed here.
  CudaStream(int ordinal, cudaStream_t borrowed) : ordinal_(ordinal), stream_(borrowed) {
    ZERO_CUDA_CHECK(cudaSetDevice(ordinal));
    allocate_partials();
  }

  ~CudaStream() override {
    // Work still queued may use the partials: on a stream of our own, let it finish before
    // freeing them. A borrowed stream may already be destroyed by its owner and is never
    // touched here; cudaFree waits for the whole device's work before it frees.
    static_cast<void>(cudaSetDevice(ordinal_));
    if (owned_) static_cast<void>(cudaStreamSynchronize(stream_));
    static_cast<void>(cudaFree(partials_));
    if (owned_) static_cast<void>(cudaStreamDestroy(stream_));
    clear_last_error();
  }

  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  void synchronize() override {
    ZERO_CUDA_CHECK(cudaSetDevice(ordinal_));
    ZERO_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void* native() const noexcept override { return static_cast<void*>(stream_); }

  cudaStream_t handle() const noexcept { return stream_; }
  int ordinal() const noexcept { return ordinal_; }
  // Scratch of the sum of squares, used only by work on this stream (so streams never race).
  double* partials() const noexcept { return partials_; }

 private:
  void allocate_partials() {
    const cudaError_t status = cudaMalloc(reinterpret_cast<void**>(&partials_),
                                          sizeof(double) * cuda::kSumSquaresPartials);
    if (status != cudaSuccess) {
      if (owned_) static_cast<void>(cudaStreamDestroy(stream_));
      throw_cuda_error(status, "cudaMalloc(sum-of-squares partials)", __FILE__, __LINE__);
    }
  }

  int ordinal_;
  bool owned_ = false;
  cudaStream_t stream_ = nullptr;
  double* partials_ = nullptr;
};

// The CUDA stream behind `stream`, which must come from a CUDA device on GPU `ordinal`.
CudaStream& cuda_stream(Stream& stream, int ordinal) {
  auto* cuda = dynamic_cast<CudaStream*>(&stream);
  if (cuda == nullptr) {
    throw Error(ErrorCategory::usage, "the stream given to the CUDA device is not a CUDA stream");
  }
  if (cuda->ordinal() != ordinal) {
    throw make_error(ErrorCategory::usage, "a stream of cuda:{} was given to work on cuda:{}",
                     cuda->ordinal(), ordinal);
  }
  return *cuda;
}

class CudaEvent final : public Event {
 public:
  CudaEvent(int ordinal, bool timing) : ordinal_(ordinal), timing_(timing) {
    ZERO_CUDA_CHECK(cudaSetDevice(ordinal));
    ZERO_CUDA_CHECK(
        cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }

  ~CudaEvent() override {
    static_cast<void>(cudaSetDevice(ordinal_));
    static_cast<void>(cudaEventDestroy(event_));
    clear_last_error();
  }

  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(Stream& stream) override {
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    ZERO_CUDA_CHECK(cudaSetDevice(ordinal_));
    ZERO_CUDA_CHECK(cudaEventRecord(event_, cuda.handle()));
  }

  void block(Stream& stream) override {
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    ZERO_CUDA_CHECK(cudaSetDevice(ordinal_));
    ZERO_CUDA_CHECK(cudaStreamWaitEvent(cuda.handle(), event_, 0));
  }

  bool query() override {
    ZERO_CUDA_CHECK(cudaSetDevice(ordinal_));
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaSuccess) return true;
    if (status == cudaErrorNotReady) {
      // Not an error; do not leave it for the next launch check.
      if (cudaPeekAtLastError() == cudaErrorNotReady) clear_last_error();
      return false;
    }
    throw_cuda_error(status, "cudaEventQuery(event)", __FILE__, __LINE__);
  }

  void synchronize() override {
    ZERO_CUDA_CHECK(cudaSetDevice(ordinal_));
    ZERO_CUDA_CHECK(cudaEventSynchronize(event_));
  }

  float elapsed_ms_since(Event& start) override {
    auto* begin = dynamic_cast<CudaEvent*>(&start);
    if (begin == nullptr) {
      throw Error(ErrorCategory::usage, "elapsed_ms_since: the start event is not a CUDA event");
    }
    if (!timing_ || !begin->timing_) {
      throw Error(ErrorCategory::usage,
                  "elapsed_ms_since: both events must be created with timing = true");
    }
    ZERO_CUDA_CHECK(cudaSetDevice(ordinal_));
    float milliseconds = 0.0f;
    ZERO_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, begin->event_, event_));
    return milliseconds;
  }

 private:
  int ordinal_;
  bool timing_;
  cudaEvent_t event_ = nullptr;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {
    int count = 0;
    ZERO_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (ordinal < 0 || ordinal >= count) {
      throw make_error(ErrorCategory::device,
                       "CUDA device {} does not exist: the CUDA runtime reports {} GPU(s)", ordinal,
                       count);
    }
    ZERO_CUDA_CHECK(cudaSetDevice(ordinal));
    cudaDeviceProp properties{};
    ZERO_CUDA_CHECK(cudaGetDeviceProperties(&properties, ordinal));
    description_ = fmt::format("cuda:{} ({}, {:.1f} GiB)", ordinal, properties.name,
                               static_cast<double>(properties.totalGlobalMem) / (1 << 30));
    // The UUID, as nvidia-smi prints it (GPU-xxxxxxxx-...): the same whatever
    // CUDA_VISIBLE_DEVICES numbers it in each process.
    const auto* u = reinterpret_cast<const unsigned char*>(properties.uuid.bytes);
    uuid_ = fmt::format(
        "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-"
        "{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
        u[14], u[15]);
    default_stream_ = std::make_unique<CudaStream>(ordinal);
  }

  ~CudaDevice() override {
    default_stream_.reset();
    // Reservations the caller never returned (a leak on its side) are not freed here: the
    // memory may still be in use by work we cannot see.
  }

  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  DeviceType type() const noexcept override { return DeviceType::cuda; }
  int ordinal() const noexcept override { return ordinal_; }
  std::string description() const override { return description_; }
  bool offload_beside() const noexcept override { return true; }

  std::optional<OwnMemory> own_memory() const override {
    ZERO_CUDA_CHECK(cudaSetDevice(ordinal_));
    std::size_t free = 0, total = 0;
    ZERO_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return OwnMemory{free, total, uuid_};
  }

  void* reserve(Tier tier, std::size_t bytes) override {
    switch (tier) {
      case Tier::device:
        if (bytes == 0) return nullptr;
        return reserve_cuda(tier, bytes);
      case Tier::pinned:
        if (bytes == 0) return nullptr;
        return reserve_cuda(tier, bytes);
      case Tier::host:
        return host_memory::map(bytes, Tier::host);
      case Tier::nvme:
        break;
    }
    throw Error(ErrorCategory::usage,
                "Device::reserve: the nvme tier is file space, not memory; use an nvme arena");
  }

  void unreserve(Tier tier, void* base, std::size_t bytes) noexcept override {
    if (base == nullptr) return;
    switch (tier) {
      case Tier::device:
      case Tier::pinned: {
        void* raw = base;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          auto found = realigned_.find(base);
          if (found != realigned_.end()) {
            raw = found->second;
            realigned_.erase(found);
          }
        }
        static_cast<void>(cudaSetDevice(ordinal_));
        if (tier == Tier::device) {
          static_cast<void>(cudaFree(raw));
        } else {
          static_cast<void>(cudaFreeHost(raw));
        }
        clear_last_error();
        return;
      }
      case Tier::host:
        host_memory::unmap(base, bytes);
        return;
      case Tier::nvme:
        return;
    }
  }

  bool host_addressable(Tier tier) const noexcept override { return tier != Tier::device; }

  void launch_host_task(Stream& stream, std::function<void()> task) override {
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    activate();
    auto* owned = new std::function<void()>(std::move(task));
    const cudaError_t status = cudaLaunchHostFunc(
        cuda.handle(),
        [](void* data) {
          std::unique_ptr<std::function<void()>> run(static_cast<std::function<void()>*>(data));
          (*run)();
        },
        owned);
    if (status != cudaSuccess) {
      delete owned;
      throw_cuda_error(status, "cudaLaunchHostFunc", __FILE__, __LINE__);
    }
  }

  void* host_alias(const void* pointer) override {
    cudaPointerAttributes attributes{};
    activate();
    if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) clear_last_error();
    if (attributes.type == cudaMemoryTypeDevice) {
      throw make_error(ErrorCategory::usage,
                       "host_alias: {} is GPU memory of {}, which the host cannot address", pointer,
                       description_);
    }
    return const_cast<void*>(pointer);
  }

  Stream& default_stream() override { return *default_stream_; }

  std::unique_ptr<Stream> create_stream() override {
    return std::make_unique<CudaStream>(ordinal_);
  }

  std::unique_ptr<Stream> wrap_stream(void* native) override {
    // NULL: the legacy default stream, where a caller without streams of its own works.
    const cudaStream_t handle =
        native != nullptr ? static_cast<cudaStream_t>(native) : cudaStreamLegacy;
    if (native != nullptr) {
      int device = -1;
      ZERO_CUDA_CHECK(cudaStreamGetDevice(handle, &device));
      if (device != ordinal_) {
        throw make_error(ErrorCategory::usage,
                         "the stream passed to the engine belongs to cuda:{}, the engine runs on "
                         "cuda:{}; pass a stream of the engine's GPU (zero_data_location)",
                         device, ordinal_);
      }
    }
    return std::make_unique<CudaStream>(ordinal_, handle);
  }

  std::unique_ptr<Event> create_event(bool timing) override {
    return std::make_unique<CudaEvent>(ordinal_, timing);
  }

  void synchronize() override {
    activate();
    ZERO_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // Synchronous: ordered after the work already on the default stream, complete on return
  // (a plain cudaMemcpy runs on the legacy stream, which our non-blocking streams do not
  // wait for, and may return before a pageable-to-device copy has landed).
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    activate();
    const cudaStream_t stream = default_stream_->handle();
    ZERO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    ZERO_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  void copy_async(void* dst, const void* src, std::size_t bytes, Stream& stream) override {
    if (bytes == 0) return;
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    activate();
    ZERO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda.handle()));
  }

  void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
            Stream& stream) override {
    const cuda::Format from = format_of(src_dtype);
    const cuda::Format to = format_of(dst_dtype);
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    if (count == 0) return;
    check_element_alignment(src, src_dtype, "cast");
    check_element_alignment(dst, dst_dtype, "cast");
    activate();
    if (src_dtype == dst_dtype) {
      if (src != dst) {
        ZERO_CUDA_CHECK(cudaMemcpyAsync(dst, src, count * dtype_size(src_dtype), cudaMemcpyDefault,
                                        cuda.handle()));
      }
      return;
    }
    ZERO_CUDA_CHECK(cuda::launch_cast(src, from, dst, to, count, cuda.handle()));
  }

  void scale(void* data, DType dtype, std::size_t count, float factor, Stream& stream) override {
    const cuda::Format format = format_of(dtype);
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    if (count == 0) return;
    check_element_alignment(data, dtype, "scale");
    activate();
    ZERO_CUDA_CHECK(cuda::launch_scale(data, format, count, factor, cuda.handle()));
  }

  void accumulate(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
                  float factor, Stream& stream) override {
    const cuda::Format from = format_of(src_dtype);
    const cuda::Format to = format_of(dst_dtype);
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    if (count == 0) return;
    check_element_alignment(src, src_dtype, "accumulate");
    check_element_alignment(dst, dst_dtype, "accumulate");
    activate();
    ZERO_CUDA_CHECK(cuda::launch_accumulate(src, from, dst, to, count, factor, cuda.handle()));
  }

  void fill(void* data, DType dtype, std::size_t count, float value, Stream& stream) override {
    const cuda::Format format = format_of(dtype);
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    if (count == 0) return;
    check_element_alignment(data, dtype, "fill");
    activate();
    ZERO_CUDA_CHECK(cuda::launch_fill(data, format, count, value, cuda.handle()));
  }

  void sum_squares(const void* data, DType dtype, std::size_t count, float* accumulator,
                   Stream& stream) override {
    const cuda::Format format = format_of(dtype);
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    if (count == 0) return;
    check_element_alignment(data, dtype, "sum_squares");
    check_element_alignment(accumulator, DType::f32, "sum_squares (accumulator)");
    activate();
    ZERO_CUDA_CHECK(
        cuda::launch_sum_squares(data, format, count, cuda.partials(), accumulator, cuda.handle()));
  }

  void check_finite(const void* data, DType dtype, std::size_t count, float* flag,
                    Stream& stream) override {
    const cuda::Format format = format_of(dtype);
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    if (count == 0) return;
    check_element_alignment(data, dtype, "check_finite");
    check_element_alignment(flag, DType::f32, "check_finite (flag)");
    activate();
    ZERO_CUDA_CHECK(cuda::launch_check_finite(data, format, count, flag, cuda.handle()));
  }

  void quantize(const void* src, DType dtype, std::size_t count, std::size_t parts, void* packed,
                Stream& stream) override {
    const cuda::Format format = format_of(dtype);
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    if (count == 0 || parts == 0) return;
    check_element_alignment(src, dtype, "quantize");
    check_element_alignment(packed, DType::f32, "quantize (packed scales)");
    activate();
    ZERO_CUDA_CHECK(cuda::launch_quantize(src, format, count, parts, packed, cuda.handle()));
  }
  void dequantize(const void* packed, std::size_t count, std::size_t parts, void* dst, DType dtype,
                  Stream& stream) override {
    launch_dequantize(packed, count, parts, dst, dtype, /*sum=*/false, stream);
  }
  void dequantize_sum(const void* packed, std::size_t count, std::size_t parts, void* dst,
                      DType dtype, Stream& stream) override {
    launch_dequantize(packed, count, parts, dst, dtype, /*sum=*/true, stream);
  }

 private:
  void activate() const { ZERO_CUDA_CHECK(cudaSetDevice(ordinal_)); }

  void launch_dequantize(const void* packed, std::size_t count, std::size_t parts, void* dst,
                         DType dtype, bool sum, Stream& stream) {
    const cuda::Format format = format_of(dtype);
    CudaStream& cuda = cuda_stream(stream, ordinal_);
    if (count == 0 || (parts == 0 && !sum)) return;
    check_element_alignment(dst, dtype, sum ? "dequantize_sum" : "dequantize");
    check_element_alignment(packed, DType::f32, "dequantize (packed scales)");
    activate();
    ZERO_CUDA_CHECK(cuda::launch_dequantize(packed, count, parts, dst, format, sum, cuda.handle()));
  }

  // One cudaMalloc or cudaHostAlloc; nullptr with *status set when it fails.
  void* allocate(Tier tier, std::size_t bytes, cudaError_t* status) {
    void* base = nullptr;
    *status = tier == Tier::device ? cudaMalloc(&base, bytes)
                                   : cudaHostAlloc(&base, bytes, cudaHostAllocPortable);
    if (*status != cudaSuccess) {
      clear_last_error();
      return nullptr;
    }
    return base;
  }

  void release(Tier tier, void* base) noexcept {
    static_cast<void>(tier == Tier::device ? cudaFree(base) : cudaFreeHost(base));
    clear_last_error();
  }

  [[noreturn]] void throw_reserve_failure(Tier tier, std::size_t bytes, cudaError_t status) {
    const bool device = tier == Tier::device;
    throw make_error(ErrorCategory::out_of_memory,
                     "could not reserve {} bytes of {} memory on cuda:{} ({}: {}: {}); lower the "
                     "buffer sizes in the config or free {} memory",
                     bytes, tier_name(tier), ordinal_, device ? "cudaMalloc" : "cudaHostAlloc",
                     cudaGetErrorName(status), cudaGetErrorString(status),
                     device ? "GPU" : "pinned host");
  }

  // cudaMalloc / cudaHostAlloc, aligned to kReserveAlignment: the runtime aligns small
  // allocations less, so those are redone kReserveAlignment bytes larger and the aligned
  // address inside remembered for unreserve.
  void* reserve_cuda(Tier tier, std::size_t bytes) {
    activate();
    cudaError_t status = cudaSuccess;
    void* base = allocate(tier, bytes, &status);
    if (base == nullptr) throw_reserve_failure(tier, bytes, status);
    if (reinterpret_cast<std::uintptr_t>(base) % kReserveAlignment == 0) return base;
    release(tier, base);
    if (bytes > std::numeric_limits<std::size_t>::max() - kReserveAlignment) {
      throw_reserve_failure(tier, bytes, cudaErrorMemoryAllocation);
    }
    void* raw = allocate(tier, bytes + kReserveAlignment, &status);
    if (raw == nullptr) throw_reserve_failure(tier, bytes, status);
    const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(raw);
    void* aligned = reinterpret_cast<void*>((address + kReserveAlignment - 1) &
                                            ~static_cast<std::uintptr_t>(kReserveAlignment - 1));
    if (aligned != raw) {
      try {
        std::lock_guard<std::mutex> lock(mutex_);
        realigned_.emplace(aligned, raw);
      } catch (...) {
        release(tier, raw);
        throw;
      }
    }
    return aligned;
  }

  int ordinal_;
  std::string description_;
  std::string uuid_;  // "GPU-..." (own_memory)
  std::unique_ptr<CudaStream> default_stream_;
  std::mutex mutex_;
  // Aligned address -> the allocation it lies in, for reservations that needed realigning.
  std::unordered_map<void*, void*> realigned_;
};

}  // namespace

CudaProbe probe_cuda() noexcept {
  try {
    int count = 0;  // a failing cudaGetDeviceCount leaves it unset
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      clear_last_error();
      return CudaProbe{0,
                       fmt::format("{}: {}", cudaGetErrorName(status), cudaGetErrorString(status))};
    }
    if (count <= 0) return CudaProbe{0, "no CUDA device"};
    return CudaProbe{count, {}};
  } catch (...) {
    return CudaProbe{};
  }
}

std::unique_ptr<Device> create_cuda_device(int ordinal) {
  return std::make_unique<CudaDevice>(ordinal);
}

}  // namespace zero
