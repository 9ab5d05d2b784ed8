// tests/multirank/model_memory.h's NCCL world of one where NCCL is not built: none.
#include "tests/multirank/model_memory.h"

namespace zero_test {

bool nccl_built() {
  return false;
}

void* nccl_world_of_one(int) {
  return nullptr;
}
void free_nccl_world_of_one(void*) {}

}  // namespace zero_test
