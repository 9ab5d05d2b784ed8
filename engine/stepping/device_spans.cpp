// DeviceSpans (see device_spans.h).
#include "engine/stepping/device_spans.h"

#include "base/error.h"

namespace zero::engine {

DeviceSpans::DeviceSpans(Device& device, std::size_t capacity) : spans_(capacity) {
  ZERO_CHECK(capacity > 0, "DeviceSpans: no room for a span");
  for (Span& s : spans_) {
    s.begin = device.create_event(/*timing=*/true);
    s.end = device.create_event(/*timing=*/true);
  }
}

double DeviceSpans::take_oldest(bool wait) {
  Span& s = spans_[oldest_];
  if (wait) s.end->synchronize();
  const double seconds = static_cast<double>(s.end->elapsed_ms_since(*s.begin)) / 1e3;
  oldest_ = (oldest_ + 1) % spans_.size();
  --ended_;
  return seconds;
}

void DeviceSpans::begin(Stream& stream) {
  ZERO_CHECK(!open_, "a device span begun inside another");
  if (ended_ == spans_.size()) taken_ += take_oldest(/*wait=*/true);  // all in flight: room for one
  spans_[(oldest_ + ended_) % spans_.size()].begin->record(stream);
  open_ = true;
}

void DeviceSpans::end(Stream& stream) {
  ZERO_CHECK(open_, "a device span ended without its begin");
  spans_[(oldest_ + ended_) % spans_.size()].end->record(stream);
  ++ended_;
  open_ = false;
}

double DeviceSpans::take_finished(bool wait) {
  double seconds = taken_;
  taken_ = 0;
  while (ended_ > 0 && (wait || spans_[oldest_].end->query())) seconds += take_oldest(wait);
  return seconds;
}

}  // namespace zero::engine
