// A wall-clock stopwatch on the steady clock, for the engine's time breakdown and the tools.
#pragma once

#include <chrono>

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

}  // namespace zero
