// What the CUDA models need of the CUDA runtime, in plain C++ (no CUDA types): device buffers
// that free themselves, a non-blocking stream, copies, and the GPU's name and dense bf16 peak
// for MFU. Errors throw std::runtime_error naming the call and CUDA's message.
#pragma once

#include <cstddef>
#include <string>

#include "models/cuda/layers.h"

namespace zero::cuda_layers {

// Throws std::runtime_error("<what>: <CUDA's message>") when `status` (a cudaError_t) is not 0.
void check(int status, const char* what);

// Device memory of `bytes`, zeroed when allocated; moved, never copied. The zeroing is queued
// (cudaMemsetAsync) on the stream the buffer is for, so work queued there after it sees zeros;
// work on another stream must be ordered after that stream first.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, Stream stream) { resize(bytes, stream); }
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Frees and allocates `bytes`, zeroed on `stream`; 0 frees.
  void resize(std::size_t bytes, Stream stream);
  std::size_t bytes() const noexcept { return bytes_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Pinned host memory of `bytes` (cudaMallocHost), which a copy to the host fills without the
// host waiting for it; moved, never copied.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
};

// An event, destroyed with the object: what a stream has queued so far, recorded, and waited
// for by the host; with `timing`, the time between two of them.
class CudaEvent {
 public:
  explicit CudaEvent(bool timing = false);
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  void record(Stream stream);
  void synchronize() const;
  // Milliseconds from `start` to this event, both recorded timing events; waits for this one.
  float elapsed_ms_since(const CudaEvent& start) const;

 private:
  void* event_ = nullptr;
};

// A non-blocking stream on the current device, destroyed with the object.
class CudaStream {
 public:
  CudaStream();
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  Stream get() const noexcept { return stream_; }
  void synchronize() const;

 private:
  Stream stream_ = nullptr;
};

// Asynchronous copies on `stream` (host memory pageable or pinned), and their zeroing.
void copy_to_device(void* device, const void* host, std::size_t bytes, Stream stream);
void copy_to_host(void* host, const void* device, std::size_t bytes, Stream stream);
void copy_device(void* to, const void* from, std::size_t bytes, Stream stream);
// Waits for the work queued on `stream`.
void synchronize(Stream stream);
void zero_bytes(void* device, std::size_t bytes, Stream stream);
// Makes `ordinal` the calling thread's current device.
void set_device(int ordinal);

// The GPU's name, and its dense bf16 tensor peak in FLOP/s when known (H100 SXM 989e12, H100
// PCIe 756e12, H100 NVL 835e12, H200 989e12, A100 312e12, L40S 362e12; else 0).
struct GpuPeak {
  std::string name;
  double bf16_flops = 0;
};
GpuPeak gpu_peak(int ordinal);

}  // namespace zero::cuda_layers
