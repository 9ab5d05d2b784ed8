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

// The longest wait that wait_until() spins rather than sleeps: longer than a sleeping thread's
// wake-up is late on a virtual machine (25-35 us).
inline constexpr std::chrono::microseconds kLongestSpin{100};

// Returns at `end` on the steady clock: spins when `end` is at most kLongestSpin away, else
// sleeps. A sleep ends when the kernel wakes the thread, late by more than a short wait's
// length; a spin takes the core for as long as it lasts. `now` and `sleep_until` are the clock
// and the sleep (a test's own; otherwise std::chrono::steady_clock's and std::this_thread's).
template <class Now, class SleepUntil>
void wait_until(std::chrono::steady_clock::time_point end, Now now, SleepUntil sleep_until) {
  if (end - now() > kLongestSpin) {
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
