// Stands in for the MPI backend when zero is built without MPI.
#include "base/error.h"
#include "comm/backends.h"

namespace zero::comm {

bool mpi_backend_built() noexcept {
  return false;
}

std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions&) {
  throw Error(ErrorCategory::comm,
              "zero was built without MPI (ZERO_WITH_MPI=OFF or no MPI found)");
}

std::unique_ptr<Communicator> wrap_mpi(const void*, const CommOptions&) {
  return make_mpi_communicator({});
}

}  // namespace zero::comm
