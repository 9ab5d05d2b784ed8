// LinkClock (see link_clock.h).
#include "device/cpu/link_clock.h"

#include <algorithm>
#include <chrono>

#include "base/timer.h"

namespace zero::cpu {

void LinkClock::reserved(const void* base, std::size_t bytes, Tier tier) {
  if (base == nullptr || bytes == 0) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(base);
  std::lock_guard lock(mutex_);
  reservations_[begin] = {begin + bytes, tier};
}

void LinkClock::unreserved(const void* base) {
  std::lock_guard lock(mutex_);
  reservations_.erase(reinterpret_cast<std::uintptr_t>(base));
}

Tier LinkClock::tier_of(const void* pointer) const {
  const auto at = reinterpret_cast<std::uintptr_t>(pointer);
  std::lock_guard lock(mutex_);
  auto it = reservations_.upper_bound(at);
  if (it == reservations_.begin()) return Tier::host;
  --it;
  return at < it->second.first ? it->second.second : Tier::host;
}

LinkClock::Cost LinkClock::copy(const void* dst, const void* src, std::size_t bytes) const {
  const Tier to = tier_of(dst);
  const Tier from = tier_of(src);
  const double latency = link_.latency_us * 1e-6;
  const auto rate = [&](double gbps, Tier host_side) {
    return gbps * 1e9 * (host_side == Tier::pinned ? 1.0 : link_.pageable);
  };
  if (from == Tier::device && to == Tier::device) {
    return {"d2d", kNoEngine, latency + 2.0 * bytes / (link_.kernel_gbps * 1e9), bytes};
  }
  if (to == Tier::device) {
    return {"h2d", kH2d, latency + bytes / rate(link_.h2d_gbps, from), bytes};
  }
  if (from == Tier::device) {
    return {"d2h", kD2h, latency + bytes / rate(link_.d2h_gbps, to), bytes};
  }
  return {"h2h", kNoEngine, 0.0, bytes};  // host memory on both sides: a memcpy, as it is
}

LinkClock::Cost LinkClock::kernel(std::size_t bytes) const {
  return {"kernel", kNoEngine, link_.latency_us * 1e-6 + bytes / (link_.kernel_gbps * 1e9), bytes};
}

void LinkClock::run(const std::string& lane, const Cost& cost, const std::function<void()>& work) {
  const auto length = std::chrono::duration_cast<Trace::Clock::duration>(
      std::chrono::duration<double>(cost.seconds));
  // A copy holds its direction's engine while it runs and for as long as it lasts.
  std::unique_lock<std::mutex> engine;
  if (cost.engine != kNoEngine) engine = std::unique_lock(engines_[cost.engine]);
  const auto begin = Trace::Clock::now();
  work();
  const auto end = std::max(Trace::Clock::now(), begin + length);
  wait_until(end);
  trace_.record(lane, cost.name, begin, end, cost.bytes);
}

void LinkClock::run_host(const std::string& lane, const std::function<void()>& work) {
  const auto begin = Trace::Clock::now();
  work();
  trace_.record(lane, "host task", begin, Trace::Clock::now());
}

}  // namespace zero::cpu
