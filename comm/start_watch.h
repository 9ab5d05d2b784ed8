// A bounded start-up. MPI_Init_thread waits for every rank of the job, with no timeout of its
// own: one rank that stalls or dies before it (stopped, swapping, stuck on a file system)
// would hang the others forever. While a StartWatch lives, a thread waits for done(); when
// ZERO_START_TIMEOUT seconds (default 300) pass first, it prints which ranks have not arrived
// and ends this process with kStartTimeoutExit, so that the launcher ends the job. Arrival is
// a file `rank<R>` in ZERO_START_DIR (zero-run makes one per job on a single node and passes
// it on); without that directory the message cannot name the missing ranks.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "comm/launch.h"

namespace zero::comm {

inline constexpr int kStartTimeoutExit = 124;  // as timeout(1)

struct StartSettings {
  double timeout_seconds = 300;
  std::string dir;  // ZERO_START_DIR, empty when unset
};

// ZERO_START_TIMEOUT (seconds > 0) and ZERO_START_DIR; a usage Error naming the variable when
// the timeout is not a positive number.
StartSettings start_settings(const Environment& environment);

// The message for ranks that have not all started after `seconds` while `what` waits: names
// those of 0..world-1 without an arrival file in the settings' dir.
std::string start_timeout_message(const LaunchInfo& launch, const StartSettings& settings,
                                  double seconds, const std::string& what);

class StartWatch {
 public:
  // Writes this rank's arrival file and starts the watch. `what` names the wait
  // ("MPI_Init_thread").
  StartWatch(LaunchInfo launch, StartSettings settings, std::string what);
  ~StartWatch();  // done()
  StartWatch(const StartWatch&) = delete;
  StartWatch& operator=(const StartWatch&) = delete;

  void done();  // every rank is there: the watch ends

 private:
  void watch();

  LaunchInfo launch_;
  StartSettings settings_;
  std::string what_;
  std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace zero::comm
