// CallerOrder: the order between the caller's stream and the engine's (zero.h, "Streams").
// A hook's work comes after the caller's earlier work on the stream it passes (after()), and
// the caller's later work there comes after what the hook provides (before()): events, never
// host synchronisation, except where the caller is the host thread itself (the CPU device),
// whose waiting on the host is the only way to order it. The engine's own work runs on the
// device's default stream; the communicator orders its collectives after it.
//
// Owns: the wrappers of the callers' native streams, the stream of a caller that passes none
// (the CPU's calling thread, CUDA's legacy default stream), the two events. Internal to engine/.
#pragma once

#include <map>
#include <memory>

#include "device/device.h"

namespace zero::engine {

class CallerOrder {
 public:
  explicit CallerOrder(Device& device)
      : device_(device),
        unnamed_(device.wrap_stream(nullptr)),
        caller_done_(device.create_event()),
        engine_done_(device.create_event()) {}

  // The Stream for a caller's native handle (nullptr: the caller that passes none), kept for
  // the engine's life.
  Stream* wrap(void* native) {
    if (native == nullptr) return nullptr;
    auto& wrapped = wrapped_[native];
    if (!wrapped) wrapped = device_.wrap_stream(native);
    return wrapped.get();
  }

  // The caller's stream of a hook (null: the unnamed one), remembered as the latest.
  Stream& caller(Stream* stream) {
    latest_ = stream != nullptr ? stream : unnamed_.get();
    return *latest_;
  }
  // The stream of the latest hook: the step and the other calls without a stream come after
  // the work the caller queued there.
  Stream& latest() { return latest_ != nullptr ? *latest_ : *unnamed_; }

  // The engine's later work after the caller's work so far.
  void after(Stream& caller) {
    caller_done_->record(caller);
    caller_done_->block(device_.default_stream());
  }
  // The caller's later work after the engine's work so far.
  void before(Stream& caller) {
    engine_done_->record(device_.default_stream());
    engine_done_->block(caller);
  }

 private:
  Device& device_;
  std::unique_ptr<Stream> unnamed_;
  std::map<void*, std::unique_ptr<Stream>> wrapped_;
  Stream* latest_ = nullptr;
  std::unique_ptr<Event> caller_done_;
  std::unique_ptr<Event> engine_done_;
};

}  // namespace zero::engine
