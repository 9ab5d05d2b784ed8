// Work: bounded waiting over a backend's WorkState.
#include "comm/work.h"

#include <thread>

#include "base/error.h"
#include "device/device.h"

namespace zero {

bool Work::test() {
  if (done_ || !state_) return true;
  state_->check_health();
  done_ = state_->poll();
  return done_;
}

void Work::wait() {
  if (done_ || !state_) return;
  wait(state_->default_timeout());
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (done_ || !state_) return;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = start + timeout;
  // Spin briefly (small collectives finish in microseconds), then back off to short sleeps so
  // that ranks sharing cores leave them to the ranks still working.
  for (int round = 0;; ++round) {
    if (test()) return;
    const auto now = clock::now();
    if (now >= deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
      throw Error(ErrorCategory::timeout, state_->expire(waited));
    }
    if (round < 64) {
      std::this_thread::yield();
    } else {
      const auto pause = std::chrono::microseconds(round < 1024 ? 20 : 200);
      std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - now));
    }
  }
}

void Work::block(Stream& stream) {
  if (done_ || !state_) return;
  state_->check_health();
  // Host-completed backends: once the work is complete its results are in memory, so waiting
  // here orders everything the stream does later.
  if (!state_->block(stream)) wait();
}

}  // namespace zero
