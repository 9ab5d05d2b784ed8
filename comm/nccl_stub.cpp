// Stands in for the NCCL backend when zero is built without NCCL.
#include "base/error.h"
#include "comm/backends.h"

namespace zero::comm {

bool nccl_backend_built() noexcept {
  return false;
}

std::unique_ptr<Communicator> make_nccl_communicator(const CommOptions&, const LaunchInfo&,
                                                     const ShareId&) {
  throw Error(ErrorCategory::comm,
              "zero was built without NCCL (ZERO_WITH_NCCL=OFF, or CUDA or NCCL not found)");
}

std::unique_ptr<Communicator> wrap_nccl(void*, const CommOptions&) {
  return make_nccl_communicator({}, {}, {});
}

}  // namespace zero::comm
