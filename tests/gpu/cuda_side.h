// What the tests of the CUDA models against the CPU models need of the GPU they train on, in the
// two programs that run them: on a real GPU (cuda_side_gpu.cpp: the engine's CUDA device on GPU
// 0, an NCCL world of one) and under the CPU emulation of CUDA (tests/emu/cuda_side_emulated.cpp:
// the engine on the CPU device, whose parameter and gradient buffers stand for device memory,
// so that CI runs the CUDA models' real kernels, whole, on every build).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "zero/zero.h"

namespace zero_test {

class CudaSide {
 public:
  CudaSide();
  ~CudaSide();
  CudaSide(const CudaSide&) = delete;
  CudaSide& operator=(const CudaSide&) = delete;

  // The device (and communicator) of the engine the CUDA model trains with.
  void fill(zero_create_options& options) const;
  // After zero_init, before the first forward: makes the engine's data and gradient buffers of
  // every parameter (their element counts by id) the CUDA layers' to read and write while the
  // engine hands them out (zero_param_data, zero_grad_buffer).
  void reach(zero_engine* engine, const std::vector<std::size_t>& numels);
  // The `count` bf16 values of an engine buffer, on the host.
  std::vector<std::uint16_t> read_bf16(const void* buffer, std::size_t count) const;
  // Whether [pointer, pointer + bytes) lies in a data or gradient buffer that the engine given to
  // reach() hands out now (bytes 0: the pointer may be the buffer's end).
  bool engine_buffer(const void* pointer, std::size_t bytes) const {
    const auto p = reinterpret_cast<std::uintptr_t>(pointer);
    for (std::size_t id = 0; engine_ != nullptr && id < numels_.size(); ++id) {
      for (const auto get : {zero_param_data, zero_grad_buffer}) {
        void* buffer = nullptr;
        if (get(engine_, static_cast<int>(id), &buffer) != ZERO_OK || buffer == nullptr) continue;
        const auto first = reinterpret_cast<std::uintptr_t>(buffer);
        if (p >= first && p - first + bytes <= numels_[id] * 2) return true;  // bf16
      }
    }
    return false;
  }

 private:
  void* nccl_ = nullptr;             // the NCCL world of one (a real GPU)
  zero_engine* engine_ = nullptr;    // whose buffers stand for device memory (the emulation)
  std::vector<std::size_t> numels_;  // its parameters' element counts, by id
};

}  // namespace zero_test
