// Work that holds a device stream until the test releases it, for tests that a call returns
// without waiting for what is queued there (on a device whose streams run on their own threads:
// the asynchronous or guarded CPU device, or a GPU). The hold gives up after 10 s, so that a call
// that did wait returns at last and the test can say so (gave_up()).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "device/device.h"

namespace zero::testing {

class StreamHold {
 public:
  // Queues the hold on `stream`: the stream's later work runs once release() is called.
  StreamHold(Device& device, Stream& stream) : state_(std::make_shared<State>()) {
    device.launch_host_task(stream, [state = state_] {
      for (int ms = 0; !state->released.load(); ++ms) {
        if (ms == 10000) {
          state->gave_up = true;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  // Lets the stream go on (the test's checks may still fail after; the stream must not wait).
  ~StreamHold() { release(); }
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;

  void release() { state_->released = true; }
  // Whether the hold ran out of time before release(): something waited for the stream.
  bool gave_up() const { return state_->gave_up.load(); }

 private:
  struct State {
    std::atomic<bool> released{false};
    std::atomic<bool> gave_up{false};
  };
  std::shared_ptr<State> state_;  // shared with the held task, which may outlive this
};

}  // namespace zero::testing
