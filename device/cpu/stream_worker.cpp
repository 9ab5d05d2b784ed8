// StreamWorker and Marker (stream_worker.h).
#include "device/cpu/stream_worker.h"

#include <exception>

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace zero::cpu {

StreamWorker::StreamWorker(bool raised) : raised_(raised), thread_([this] { run(); }) {}

StreamWorker::~StreamWorker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void StreamWorker::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
    ++submitted_;
  }
  wake_.notify_one();
}

void StreamWorker::drain() {
  std::unique_lock lock(mutex_);
  const std::uint64_t target = submitted_;
  done_.wait(lock, [&] { return finished_ >= target; });
  if (error_) std::rethrow_exception(error_);
}

void StreamWorker::run() {
  if (raised_) {
    // Linux gives each thread its own nice value (the thread id as the process id); a refusal
    // leaves the process's. The timer slack is the thread's own as well.
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), -10);
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  }
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and everything submitted has run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    ++finished_;
    done_.notify_all();
  }
}

void Marker::set() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  set_.notify_all();
}

void Marker::wait() {
  std::unique_lock lock(mutex_);
  set_.wait(lock, [&] { return done_; });
}

bool Marker::is_set() {
  std::lock_guard lock(mutex_);
  return done_;
}

}  // namespace zero::cpu
