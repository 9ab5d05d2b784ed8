// LinkClock: the timed CPU device's model of a GPU beside the host (CpuDeviceMode::timed). The
// asynchronous CPU device's copies and kernels run as they do there, and then last as long as
// they would on a GPU: a copy between host and device memory its bytes over the link's
// bandwidth in its direction (pageable host memory at a fraction of it), the copies in one
// direction one after another as a PCIe link's copy engine takes them, whatever their stream;
// a kernel (and a copy within device memory) the bytes it touches over the device memory's
// bandwidth; each plus a launch latency. So the engine's real schedule, with its real host
// work (the CPU optimizer, the host adds), runs on this machine in a GPU's time, and a bench
// can set it against its floor. Every copy and kernel is recorded in the Trace while it is
// enabled. Thread safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "device/device.h"
#include "device/memory.h"
#include "device/trace.h"

namespace zero::cpu {

class LinkClock {
 public:
  explicit LinkClock(const SimulatedLink& link) : link_(link) {}

  // The device's reservations, so that a pointer's tier is known (anything else is pageable
  // host memory).
  void reserved(const void* base, std::size_t bytes, Tier tier);
  void unreserved(const void* base);

  // What one piece of work costs: which engine takes it and for how long.
  struct Cost {
    const char* name = "kernel";  // "h2d", "d2h", "d2d", "h2h", "kernel"
    int engine = kNoEngine;       // the copy engine (direction) it waits for
    double seconds = 0;
    std::size_t bytes = 0;
  };
  Cost copy(const void* dst, const void* src, std::size_t bytes) const;
  Cost kernel(std::size_t bytes) const;

  // Runs `work` (on a stream's thread) as the device would: once no other copy is on the link
  // in its direction, then waiting out what the model says it lasts (wait_until, base/timer.h:
  // spinning what is shorter than kLongestSpin, sleeping the rest); records it on `lane`.
  void run(const std::string& lane, const Cost& cost, const std::function<void()>& work);
  // Runs a host task untimed, recording it on `lane`.
  void run_host(const std::string& lane, const std::function<void()>& work);

  Trace& trace() noexcept { return trace_; }
  bool moves_data() const noexcept { return link_.move_data; }

 private:
  static constexpr int kNoEngine = -1;
  static constexpr int kH2d = 0;
  static constexpr int kD2h = 1;

  Tier tier_of(const void* pointer) const;

  const SimulatedLink link_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::pair<std::uintptr_t, Tier>> reservations_;  // base: end, tier
  std::mutex engines_[2];  // per direction: held by the copy on the link
  Trace trace_;
};

}  // namespace zero::cpu
