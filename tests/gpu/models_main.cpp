// The main of the [gpu] model tests, which use only the public API and the models: exits 77
// (ctest: skipped) with the reason when the CUDA runtime reports no GPU, else runs Catch2.
#include <cstdio>

#include <cuda_runtime.h>

#include "catch_session.h"

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no GPU: %s\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device");
    return 77;
  }
  return zero::testing::run_catch(argc, argv);
}
