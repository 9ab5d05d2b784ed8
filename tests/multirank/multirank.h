// Shared by the multi-rank tests: the communicators every case runs on, created once in main.
// Every rank runs the same cases in the same order, so collectives match across ranks; cases
// use CHECK rather than REQUIRE so that a failure does not skip a collective on one rank.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zero::testing {

struct Variant {
  std::string name;  // "mpi poll", "mpi thread", "mpi staged, ..."
  Communicator* comm;
};

// The variants under test (each a communicator over the whole job).
const std::vector<Variant>& variants();
// A second communicator over the whole job, for coordinating independently of the first.
Communicator& side_channel();

}  // namespace zero::testing
