// A stand-in for a model's compute in the GPU engine tests: one thread that keeps the stream
// busy for a number of GPU clock cycles.
#include <cuda_runtime.h>

#include "tests/gpu/spin_kernel.h"

namespace {

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

namespace zero_test {

bool spin_on(void* stream, long long cycles) {
  spin<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(cycles);
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace zero_test
