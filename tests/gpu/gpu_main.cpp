// The main of the [gpu] test program: exits 77 (ctest: skipped) with the reason when the CUDA
// runtime reports no GPU, else runs the Catch2 session.
#include <cstdio>

#include "catch_session.h"
#include "device/device.h"

int main(int argc, char** argv) {
  const zero::CudaProbe probe = zero::probe_cuda();
  if (probe.device_count == 0) {
    std::printf("SKIPPED: no GPU: %s\n", probe.reason.c_str());
    return 77;
  }
  return zero::testing::run_catch(argc, argv);
}
