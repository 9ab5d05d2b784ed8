// `zero-run --supervise -- COMMAND`: how mpirun runs each rank under zero-run. The supervisor
// reports to zero-run's RankReports (rank_reports.h) at ZERO_RUN_REPORT when the rank starts
// and how it ended, runs COMMAND as its child (passing signals on, the child dying with it),
// and ends as the child did: with its exit status, or killed by the same signal. Where zero-run
// cannot be reached it says so and runs the rank anyway.
#pragma once

#include <string>
#include <vector>

namespace zero::run {

int supervise(const std::vector<std::string>& command);

}  // namespace zero::run
