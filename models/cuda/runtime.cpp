// The CUDA models' runtime plumbing (runtime.h).
#include "models/cuda/runtime.h"

#include <stdexcept>
#include <utility>

#include <cuda_runtime.h>

namespace zero::cuda_layers {

void check(int status, const char* what) {
  if (status == 0) return;
  throw std::runtime_error(std::string(what) + ": " +
                           cudaGetErrorString(static_cast<cudaError_t>(status)));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::resize(std::size_t bytes, Stream stream) {
  if (data_ != nullptr) {
    check(cudaFree(data_), "cudaFree");
    data_ = nullptr;
    bytes_ = 0;
  }
  if (bytes == 0) return;
  check(cudaMalloc(&data_, bytes), "cudaMalloc");
  bytes_ = bytes;
  // On the buffer's stream: a cudaMemset on the legacy stream is not ordered with the models'
  // non-blocking streams.
  zero_bytes(data_, bytes, stream);
}

PinnedBuffer::PinnedBuffer(std::size_t bytes) {
  check(cudaMallocHost(&data_, bytes), "cudaMallocHost");
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

CudaEvent::CudaEvent(bool timing) {
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming),
        "cudaEventCreateWithFlags");
  event_ = event;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void CudaEvent::record(Stream stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream)),
        "cudaEventRecord");
}

void CudaEvent::synchronize() const {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "cudaEventSynchronize");
}

float CudaEvent::elapsed_ms_since(const CudaEvent& start) const {
  synchronize();
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.event_),
                             static_cast<cudaEvent_t>(event_)),
        "cudaEventElapsedTime");
  return ms;
}

CudaStream::CudaStream() {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_ = stream;
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void CudaStream::synchronize() const {
  cuda_layers::synchronize(stream_);
}

void synchronize(Stream stream) {
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}

void copy_to_device(void* device, const void* host, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice,
                        static_cast<cudaStream_t>(stream)),
        "cudaMemcpyAsync to the device");
}

void copy_to_host(void* host, const void* device, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost,
                        static_cast<cudaStream_t>(stream)),
        "cudaMemcpyAsync to the host");
}

void copy_device(void* to, const void* from, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(
      cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)),
      "cudaMemcpyAsync on the device");
}

void zero_bytes(void* device, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(cudaMemsetAsync(device, 0, bytes, static_cast<cudaStream_t>(stream)), "cudaMemsetAsync");
}

void set_device(int ordinal) {
  check(cudaSetDevice(ordinal), "cudaSetDevice");
}

GpuPeak gpu_peak(int ordinal) {
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, ordinal), "cudaGetDeviceProperties");
  GpuPeak peak;
  peak.name = properties.name;
  const auto has = [&](const char* part) { return peak.name.find(part) != std::string::npos; };
  if (has("H200")) {
    peak.bf16_flops = 989e12;
  } else if (has("H100")) {
    peak.bf16_flops = has("PCIe") ? 756e12 : has("NVL") ? 835e12 : 989e12;
  } else if (has("A100")) {
    peak.bf16_flops = 312e12;
  } else if (has("L40S")) {
    peak.bf16_flops = 362e12;
  }
  return peak;
}

}  // namespace zero::cuda_layers
