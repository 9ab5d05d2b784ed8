// DeviceSpans: spans of a stream's work timed by the device's own timing events, so that
// wall_clock_breakdown can time the optimizer and the stage 1-2 all-gathers on the engine's
// device without the host waiting for them. A span is begun and ended on a stream;
// take_finished() sums the spans the device has finished, leaving the rest for a later call.
// Holds `capacity` spans in flight; a begin() that finds them all in flight waits for the
// oldest. Internal to engine/.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "device/device.h"

namespace zero::engine {

class DeviceSpans {
 public:
  static constexpr std::size_t kSpans = 8;

  explicit DeviceSpans(Device& device, std::size_t capacity = kSpans);

  void begin(Stream& stream);
  void end(Stream& stream);
  // Seconds of the ended spans the device has finished since the last call; `wait`: of every
  // ended span, waiting for them.
  double take_finished(bool wait = false);

 private:
  struct Span {
    std::unique_ptr<Event> begin, end;
  };
  // The oldest ended span's seconds (waiting for it with `wait`), its slot freed.
  double take_oldest(bool wait);

  std::vector<Span> spans_;
  double taken_ = 0;        // seconds of spans taken to make room, not yet returned
  std::size_t oldest_ = 0;  // the first ended span not taken yet
  std::size_t ended_ = 0;   // ended and not taken
  bool open_ = false;
};

}  // namespace zero::engine
