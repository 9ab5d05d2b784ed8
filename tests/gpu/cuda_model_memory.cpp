// tests/multirank/model_memory.h's GPU side: the test models read and write the engine's GPU
// buffers by copies on a non-blocking stream of their own, the one every hook is given, so the
// hooks' ordering against the caller's stream is what the copies see.
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "tests/multirank/model_memory.h"

namespace zero_test {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "cuda_model_memory: %s failed: %s\n", what, cudaGetErrorString(status));
    std::abort();
  }
}

class CudaModelMemory final : public ModelMemory {
 public:
  explicit CudaModelMemory(int ordinal) {
    check(cudaSetDevice(ordinal), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaModelMemory() override { cudaStreamDestroy(stream_); }
  void* stream() const override { return stream_; }
  void to_host(const void* engine_buffer, void* host, std::size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(host, engine_buffer, bytes, cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync to the host");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void from_host(void* engine_buffer, const void* host, std::size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(engine_buffer, host, bytes, cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync to the device");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace

int gpu_count(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (why != nullptr) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "cudaGetDeviceCount reports no GPU";
  return count;
}

std::unique_ptr<ModelMemory> make_cuda_model_memory(int ordinal) {
  return std::make_unique<CudaModelMemory>(ordinal);
}

}  // namespace zero_test
