// Running the plan's program as a child: its environment built explicitly, signals sent to
// zero-run passed on to it, and its end turned into zero-run's exit status.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "tools/zero-run/plan.h"

namespace zero::run {

// The exit status of a program that could not be started (as a shell returns).
inline constexpr int kCannotRun = 127;

struct ChildOptions {
  // The child gets SIGKILL if this process dies first (PR_SET_PDEATHSIG): for a rank's
  // supervisor, which the launcher may kill outright.
  bool die_with_parent = false;
  // Called with the child's pid once it runs, before the wait.
  std::function<void(pid_t)> started;
  // Set to the signal that ended the child, or 0 when it exited.
  int* ended_by_signal = nullptr;
};

// Starts argv (argv[0] looked up on PATH when it has no '/') with this process's environment
// plus `environment`, forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to it,
// and waits for it. Returns its exit code, or 128 + S when signal S killed it; when it cannot
// be started, prints why on stderr and returns kCannotRun.
int run_child(const std::vector<std::string>& argv, const Environment& environment,
              const ChildOptions& options = {});

// Sends `signal` to the child run_child is waiting for (nothing when there is none). Safe from
// any thread.
void signal_child(int signal);

// Whether a signal sent to this process has been passed on to the child (whoever started this
// process is ending it).
bool child_signalled();

}  // namespace zero::run
