// Trace (see trace.h).
#include "device/trace.h"

#include <utility>

namespace zero {

void Trace::enable(bool on) noexcept {
  std::lock_guard lock(mutex_);
  enabled_ = on;
}

bool Trace::enabled() const noexcept {
  std::lock_guard lock(mutex_);
  return enabled_;
}

void Trace::record(std::string_view lane, std::string_view name, Clock::time_point begin,
                   Clock::time_point end, std::size_t bytes) {
  using Ms = std::chrono::duration<double, std::milli>;
  std::lock_guard lock(mutex_);
  if (!enabled_) return;
  spans_.push_back({std::string(lane), std::string(name), Ms(begin - origin_).count(),
                    Ms(end - origin_).count(), bytes});
}

std::vector<Trace::Span> Trace::take() {
  std::lock_guard lock(mutex_);
  return std::exchange(spans_, {});
}

}  // namespace zero
