// tests/multirank/model_memory.h's GPU side in programs built without CUDA: no GPU.
#include <cstdio>
#include <cstdlib>

#include "tests/multirank/model_memory.h"

namespace zero_test {

int gpu_count(std::string* why) {
  if (why != nullptr) *why = "this program was built without CUDA";
  return 0;
}

std::unique_ptr<ModelMemory> make_cuda_model_memory(int) {
  std::fprintf(stderr, "make_cuda_model_memory: this program was built without CUDA\n");
  std::abort();
}

}  // namespace zero_test
