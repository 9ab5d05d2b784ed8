// How the C-API test models reach the engine's buffers (zero_param_data, zero_grad_buffer):
// in host memory directly, in a GPU's memory by copies on the stream the hooks are given. The
// host side is here; the GPU side is in tests/gpu/cuda_model_memory.cpp, linked into the GPU
// programs only, and tests/multirank/no_cuda_model_memory.cpp stands in for it elsewhere.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>

namespace zero_test {

class ModelMemory {
 public:
  virtual ~ModelMemory() = default;
  // The stream every hook is given: a cudaStream_t, or NULL (the CPU's calling thread).
  virtual void* stream() const = 0;
  // Copies between an engine buffer and host memory, ordered after the work queued on stream()
  // (a pre hook's gathers and zero-fills); both have completed when they return.
  virtual void to_host(const void* engine_buffer, void* host, std::size_t bytes) = 0;
  virtual void from_host(void* engine_buffer, const void* host, std::size_t bytes) = 0;
};

// Host memory: the engine's buffers are the model's to read and write between zero_ calls.
class HostModelMemory final : public ModelMemory {
 public:
  void* stream() const override { return nullptr; }
  void to_host(const void* engine_buffer, void* host, std::size_t bytes) override {
    if (bytes != 0) std::memcpy(host, engine_buffer, bytes);
  }
  void from_host(void* engine_buffer, const void* host, std::size_t bytes) override {
    if (bytes != 0) std::memcpy(engine_buffer, host, bytes);
  }
};

// The GPU side (cuda_model_memory.cpp; no_cuda_model_memory.cpp without CUDA):
// GPUs this program can use; 0 with the reason in *why when there are none.
int gpu_count(std::string* why);
// Copies through a non-blocking stream of GPU `ordinal`.
std::unique_ptr<ModelMemory> make_cuda_model_memory(int ordinal);
// Whether this program has NCCL (nccl_world_of_one.cpp, or no_nccl_world_of_one.cpp).
bool nccl_built();
// An NCCL communicator over a world of one on GPU `ordinal`, for zero_create_options.nccl_comm
// (nullptr where NCCL is not built); free_nccl_world_of_one destroys it after its engine.
void* nccl_world_of_one(int ordinal);
void free_nccl_world_of_one(void* comm);

}  // namespace zero_test
