// A wall-clock stopwatch on the steady clock, for the engine's time breakdown and the tools, and
// a wait that ends when it should.
#pragma once

#include <chrono>
#include <thread>

namespace zero {

class Timer {
 public:
  Timer() noexcept : start_(std::chrono::steady_clock::now()) {}
  void restart() noexcept { start_ = std::chrono::steady_clock::now(); }
  double seconds() const noexcept {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Seconds summed since the last take(): parts of the engine add to one and the engine's
// breakdown takes it.
class SecondsSum {
 public:
  void add(double seconds) noexcept { seconds_ += seconds; }
  double take() noexcept {
    const double seconds = seconds_;
    seconds_ = 0;
    return seconds;
  }

 private:
  double seconds_ = 0;
};

// The longest wait that wait_until() spins rather than sleeps: more than a sleeping thread's
// wake-up takes on a virtual machine (10 us kernels on the timed device, sleeping, ended 25-35 us
// late), less than a copy of a bucket over the simulated link.
inline constexpr std::chrono::microseconds kSpinMargin{100};

// Returns at `end` on the steady clock: spins when `end` is less than kSpinMargin away, else
// sleeps. A sleep ends when the kernel wakes the thread, tens of microseconds late on a virtual
// machine: three times a 10 us kernel of the timed CPU device, which stands for a GPU, whose
// work ends when its length is up. Longer waits sleep: spinning their last kSpinMargin too
// took a core from the host's work beside them on two cores (the CPU optimizer stepping during
// backward), which cost the offloaded step more than their late wake-ups. `now` and
// `sleep_until` are the clock and the sleep (a test's own; otherwise std::chrono::steady_clock's
// and std::this_thread's).
template <class Now, class SleepUntil>
void wait_until(std::chrono::steady_clock::time_point end, Now now, SleepUntil sleep_until) {
  if (end - now() > kSpinMargin) {
    sleep_until(end);
    return;
  }
  while (now() < end) {
  }
}

inline void wait_until(std::chrono::steady_clock::time_point end) {
  wait_until(
      end, [] { return std::chrono::steady_clock::now(); },
      [](std::chrono::steady_clock::time_point t) { std::this_thread::sleep_until(t); });
}

}  // namespace zero
