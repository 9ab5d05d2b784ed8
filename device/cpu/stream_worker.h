// StreamWorker: one thread running the tasks submitted to it in order, the engine of the
// asynchronous CPU device's streams. A task that throws does not stop the ones after it (the
// markers other streams wait for must still be set); the first error is kept and drain()
// rethrows it from then on, as a CUDA stream reports a fault at every later synchronisation.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace zero::cpu {

class StreamWorker {
 public:
  // `raised`: the thread asks for a higher priority than the process's (nice -10; ignored where
  // refused, as for a user without CAP_SYS_NICE): the timed device's streams stand for a GPU,
  // which takes no host core, so the host's own work (the CPU optimizer) must not delay them.
  // It also sets its timer slack to 1 ns rather than Linux's default 50 us: a timed copy or
  // kernel longer than base/timer.h's kLongestSpin sleeps out its length, and a GPU's ends when
  // its length is up, where the default slack would let each sleep run up to 50 us long (the
  // wake-up's own latency remains; shorter ones spin).
  explicit StreamWorker(bool raised = false);
  // Finishes the tasks already submitted, then stops the thread.
  ~StreamWorker();
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;

  void submit(std::function<void()> task);
  // Blocks until every task submitted so far has run; rethrows a task's error.
  void drain();
  // Whether the calling thread is this worker's (a task may not drain its own stream).
  bool on_worker() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;  // the worker: a task or the stop
  std::condition_variable done_;  // drain(): a task finished
  std::deque<std::function<void()>> tasks_;
  std::uint64_t submitted_ = 0;
  std::uint64_t finished_ = 0;
  bool stop_ = false;
  bool raised_;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members above exist
};

// A point in a stream's order: set by the worker when the tasks before it have run.
class Marker {
 public:
  void set();
  void wait();
  bool is_set();

 private:
  std::mutex mutex_;
  std::condition_variable set_;
  bool done_ = false;
};

}  // namespace zero::cpu
