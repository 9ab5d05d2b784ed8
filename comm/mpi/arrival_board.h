// Which ranks have issued which collective, for timeout messages. Ranks on the same node share
// a small MPI-3 shared-memory window with one counter per rank: the sequence number of the last
// collective it issued on this communicator. Reading it needs no progress from the other ranks,
// so a waiting rank can tell which of its node's ranks never arrived; ranks on other nodes are
// reported as unknown.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

namespace zero::comm::mpi {

class ArrivalBoard {
 public:
  // Collective over `comm` (call with the MPI lock held).
  explicit ArrivalBoard(MPI_Comm comm);
  // Frees the window (collective); skipped when `usable` is false, since a poisoned
  // communicator's ranks may never reach the matching call.
  void release(bool usable) noexcept;

  void issued(std::uint64_t sequence) noexcept;
  // "ranks that have not issued it: 2 (last issued #4); ranks 4-7 are on other nodes and
  // could not be checked", or "" when every rank this node can see has issued it.
  std::string missing(std::uint64_t sequence) const;

 private:
  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win window_ = MPI_WIN_NULL;
  std::uint64_t* mine_ = nullptr;
  std::vector<std::uint64_t*> slots_;  // per node rank
  std::vector<int> ranks_;             // node rank -> rank in the communicator
  int size_ = 0;
};

}  // namespace zero::comm::mpi
