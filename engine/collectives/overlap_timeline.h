// OverlapTimeline: how much of the engine's communication ran while the caller computed,
// measured from timing events on the streams themselves (CUDA events on a GPU), not assumed
// from the order of calls: wall_clock_breakdown's "concurrent with compute".
//
// The caller's compute is what its stream runs from the end of a pre hook to the start of the
// matching post hook (nested hooks merge); a collective runs on the communicator's stream from
// when its inputs are ready to its end. At each zero_step the spans are resolved against the
// first event of the micro-step and the overlap is the length of (union of collectives) ∩
// (union of compute), summed per kind. Collectives only where the communicator has a stream
// (NCCL): MPI runs them on a host thread, which events on a device stream cannot bracket.
// Offload copies (reduced gradients down to the CPU optimizer) on every communicator.
//
// Owns: a pool of timing events, the spans of the current micro-step and the totals since the
// last take(). Calls only the device's events. Streams: records on the callers' streams and the
// communicator's. collect() resolves the micro-step before the one it ends, whose events the
// device has long passed, and keeps this one's for the next call: the host does not wait for
// the micro-step it has just queued (the step itself need not, where its verdict stays on the
// device). take() resolves the last one too, waiting for it. Internal to engine/.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "device/device.h"

namespace zero::engine {

// The length of (union of a) ∩ (union of b), for intervals [begin, end] in any order; empty or
// reversed intervals count nothing. Exposed for tests.
double overlap_length(std::vector<std::pair<double, double>> a,
                      std::vector<std::pair<double, double>> b);
// The length of the union of the intervals.
double union_length(std::vector<std::pair<double, double>> spans);

class OverlapTimeline {
 public:
  enum class Kind { reduction, gather, copy };

  explicit OverlapTimeline(Device& device) : device_(device) {}

  // Recording runs from the first hook of a micro-step to stop(); while it is off the calls
  // below record nothing.
  bool recording() const noexcept { return recording_; }
  // The first hook of a micro-step: `caller`'s stream gets the micro-step's origin.
  void start(Stream& caller);
  void stop() noexcept { recording_ = false; }

  // The caller's compute, from the end of a pre hook to the start of its post hook.
  void compute_begin(Stream& caller);
  void compute_end(Stream& caller);

  // A collective on `comm_stream` (or an offload copy on its copy stream): begins once the work
  // queued on `inputs` so far is done (the communicator waits for the same point before it
  // starts); ends at what comm_stream has queued when comm_end is called.
  void comm_begin(Kind kind, Stream& inputs, Stream& comm_stream);
  void comm_end(Stream& comm_stream);

  // Ends the micro-step's recording: adds the figures of the one before it to the totals
  // (waiting for its events, done by now) and keeps this one's for the next call.
  void collect();

  struct Totals {
    double compute_ms = 0;
    double reduction_ms = 0, reduction_overlap_ms = 0;
    double gather_ms = 0, gather_overlap_ms = 0;
    double copy_ms = 0, copy_overlap_ms = 0;
  };
  // The totals so far, the last collected micro-step's included (waiting for its events).
  Totals take();

 private:
  struct Span {
    Event* begin = nullptr;
    Event* end = nullptr;
    Kind kind = Kind::reduction;
  };
  // One micro-step's spans and the pool of events they use, reused every other micro-step.
  struct MicroStep {
    std::vector<std::unique_ptr<Event>> events;
    std::size_t used = 0;
    Event* origin = nullptr;
    std::vector<Span> compute;
    std::vector<Span> comms;
  };

  MicroStep& current() noexcept { return micro_[current_]; }
  Event& next_event();
  // Waits for `m`'s events, adds its figures to the totals and clears it.
  void resolve(MicroStep& m);

  Device& device_;
  MicroStep micro_[2];
  int current_ = 0;  // the one recording; the other holds the last collected, if pending_
  bool pending_ = false;
  std::unique_ptr<Event> ready_;  // the comm stream's wait for a collective's inputs
  bool recording_ = false;
  int compute_depth_ = 0;
  bool comm_open_ = false;  // current().comms.back() awaits its end
  Totals totals_;
};

}  // namespace zero::engine
