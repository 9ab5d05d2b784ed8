// An embedder's own MPI communicator: zero duplicates it, runs on exactly its ranks, and
// leaves the embedder's handle usable.
#include <catch2/catch.hpp>

#include <cstdint>

#include <mpi.h>

#include "comm/create.h"
#include "multirank.h"

namespace zero::testing {

TEST_CASE("a communicator wrapped from the embedder's MPI_Comm spans exactly its ranks") {
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  // The embedder's own sub-communicator: the lower and the upper half of the job.
  const int half = world_rank < world_size / 2 ? 0 : 1;
  MPI_Comm theirs = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, half, world_rank, &theirs);
  int their_size = 0;
  MPI_Comm_size(theirs, &their_size);
  {
    comm::CommOptions options;
    options.timeout = std::chrono::seconds(120);
    auto wrapped = comm::wrap_mpi_communicator(&theirs, options);
    CHECK(wrapped->backend() == "mpi");
    CHECK(wrapped->size() == their_size);
    std::int64_t value = world_rank;
    wrapped->all_reduce(&value, 1, DType::i64, ReduceOp::sum).wait();
    std::int64_t expected = 0;
    for (int r = 0; r < world_size; ++r) expected += (r < world_size / 2 ? 0 : 1) == half ? r : 0;
    CHECK(value == expected);
  }
  // Still the embedder's to use (and to free).
  int after = 0;
  CHECK(MPI_Comm_size(theirs, &after) == MPI_SUCCESS);
  CHECK(after == their_size);
  MPI_Comm_free(&theirs);
}

}  // namespace zero::testing
