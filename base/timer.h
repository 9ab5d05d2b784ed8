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

}  // namespace zero
