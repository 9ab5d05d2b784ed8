// After a start-up timeout, which of the hosts where no rank started answer at all: each is
// asked to run `true` through the remote start mpirun uses (its plm_rsh_agent: ssh unless told
// otherwise), all at once, within a deadline. mpirun launches no rank before its daemon runs on
// every node, so one host that never answers keeps every rank from starting; this names it.
#pragma once

#include <string>
#include <vector>

namespace zero::run {

// The remote-start command mpirun uses, from its options (--mca plm_rsh_agent VALUE) or
// OMPI_MCA_plm_rsh_agent, else "ssh"; Open MPI's "A : B" alternatives give the first.
std::string remote_agent(const std::vector<std::string>& mpi_args);

// The hosts of `hosts` that did not run `AGENT HOST true` successfully within `seconds`
// (ssh gets BatchMode and a ConnectTimeout, so it fails rather than asks).
std::vector<std::string> unanswered_hosts(const std::string& agent,
                                          const std::vector<std::string>& hosts, double seconds);

}  // namespace zero::run
