// Running the plan's program as a child: its environment built explicitly, signals sent to
// zero-run passed on to it, and its end turned into zero-run's exit status.
#pragma once

#include <string>
#include <vector>

#include "tools/zero-run/plan.h"

namespace zero::run {

// The exit status of a program that could not be started (as a shell returns).
inline constexpr int kCannotRun = 127;

// Starts argv (argv[0] looked up on PATH when it has no '/') with this process's environment
// plus `environment`, forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to it,
// and waits for it. Returns its exit code, or 128 + S when signal S killed it; when it cannot
// be started, prints why on stderr and returns kCannotRun.
int run_child(const std::vector<std::string>& argv, const Environment& environment);

}  // namespace zero::run
