// tests/multirank/model_memory.h's NCCL world of one, in the GPU programs built with NCCL.
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>
#include <nccl.h>

#include "tests/multirank/model_memory.h"

namespace zero_test {

bool nccl_built() {
  return true;
}

void* nccl_world_of_one(int ordinal) {
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (cudaSetDevice(ordinal) != cudaSuccess || ncclGetUniqueId(&id) != ncclSuccess ||
      ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    std::fprintf(stderr, "nccl_world_of_one: an NCCL world of one on GPU %d could not be made\n",
                 ordinal);
    std::abort();
  }
  return comm;
}

void free_nccl_world_of_one(void* comm) {
  if (comm != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(comm));
}

}  // namespace zero_test
