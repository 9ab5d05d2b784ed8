// Which ranks have issued which collective, for timeout messages, and which have left. Ranks on
// the same node share a small MPI-3 shared-memory window with two words per rank: the sequence
// number of the last collective it issued on this communicator, and whether it has departed
// (Communicator::depart: it will issue none after that one). Reading them needs no progress from
// the other ranks, so a waiting rank can tell which of its node's ranks never arrived, and that
// one that left will never arrive; ranks on other nodes are reported as unknown.
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
  // Marks this rank departed (after the collectives it issued so far).
  void depart() noexcept;
  // "rank 1 (it left after #4)" for the node's ranks that departed before issuing collective
  // `sequence`, or "" when none did.
  std::string departed_before(std::uint64_t sequence) const;
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
