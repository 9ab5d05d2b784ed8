// Trace: spans of work on a timeline (which lane, what, when), for the timed CPU device's
// copies and kernels and the engine's host work beside them, so that tests can check the
// schedule's order and bench/ can show where a simulated step's time goes (zero-bench
// offload-step --trace writes them as a Chrome trace). Recording is off until enable(true);
// then every record() is kept until take(). Thread safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace zero {

class Trace {
 public:
  using Clock = std::chrono::steady_clock;

  struct Span {
    std::string lane;     // a stream ("default", "stream 2") or a host worker ("host adds")
    std::string name;     // "h2d", "d2h", "d2d", "kernel", "host task", "add", ...
    double begin_ms = 0;  // since the trace's origin (its construction)
    double end_ms = 0;
    std::size_t bytes = 0;  // what a copy moved or a kernel touched (0: not counted)
  };

  void enable(bool on) noexcept;
  bool enabled() const noexcept;
  // Kept only while enabled.
  void record(std::string_view lane, std::string_view name, Clock::time_point begin,
              Clock::time_point end, std::size_t bytes = 0);
  // The spans recorded so far, in the order recorded; forgets them.
  std::vector<Span> take();

 private:
  const Clock::time_point origin_ = Clock::now();
  mutable std::mutex mutex_;
  bool enabled_ = false;
  std::vector<Span> spans_;
};

// Records the span of its life on `trace` (null: nothing), for host work beside a device's.
class TraceSpan {
 public:
  TraceSpan(Trace* trace, std::string_view lane, std::string_view name) noexcept
      : trace_(trace), lane_(lane), name_(name), begin_(Trace::Clock::now()) {}
  ~TraceSpan() {
    if (trace_ == nullptr) return;
    try {
      trace_->record(lane_, name_, begin_, Trace::Clock::now());
    } catch (...) {  // out of memory for a span: the trace goes without it
    }
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Trace* trace_;
  std::string_view lane_, name_;  // literals in practice: they outlive the span
  Trace::Clock::time_point begin_;
};

}  // namespace zero
