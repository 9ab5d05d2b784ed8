// Swap directories removed when the process ends without destroying them: exit() without
// destroying the engine (an atexit hook), SIGTERM, SIGINT and SIGHUP (what zero-run and
// mpirun send when a job is stopped or another rank aborts), and zero_abort. A directory kept
// for inspection (a failed step) is named on stderr instead. Handlers are installed only for
// signals whose disposition is the default (a process that handles or ignores a signal itself
// keeps it: it is expected to exit normally), and put back when no directory is left.
// SIGKILL and crashes cannot be caught: the next run names what they leave (swap_jobs.h).
#pragma once

#include <string>
#include <string_view>

namespace zero::offload {

// One registered directory; the registry is process-wide and holds a small fixed number.
class SwapCleanup {
 public:
  // Registers `rank_dir` (inside `job_dir`) of `rank`. Without room in the registry, the
  // directory is simply not covered (a warning says so).
  SwapCleanup(const std::string& rank_dir, const std::string& job_dir, int rank);
  ~SwapCleanup();  // unregisters
  SwapCleanup(const SwapCleanup&) = delete;
  SwapCleanup& operator=(const SwapCleanup&) = delete;

  // A file created in the rank directory (its name, no '/'), removed with it.
  void add_file(std::string_view name);
  // Kept for inspection: named, not removed, at an abnormal end.
  void keep();

 private:
  int slot_ = -1;
};

// Removes every registered directory not kept, now, naming each on stderr with `why`; kept
// ones are named as left for inspection. For zero_abort, just before the process ends.
void remove_swap_directories_now(std::string_view why) noexcept;

}  // namespace zero::offload
