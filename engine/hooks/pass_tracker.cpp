// PassTracker: the hooks' order within a micro-step (see pass_tracker.h).
#include "engine/hooks/pass_tracker.h"

#include <algorithm>

#include "base/error.h"

namespace zero::engine {

bool PassTracker::any_open() const noexcept {
  return std::any_of(open_.begin(), open_.end(), [](int n) { return n != 0; });
}

bool PassTracker::enter_forward(std::size_t module) {
  if (phase_ == Phase::backward) {
    throw make_error(ErrorCategory::usage,
                     "pre_forward of module '{}' in the middle of a backward pass: call step() "
                     "after each micro-batch's backward",
                     registry_.module(module).name);
  }
  const bool starts = phase_ == Phase::idle;
  phase_ = Phase::forward;
  open_[module] += 1;
  return starts;
}

void PassTracker::leave_forward(std::size_t module) {
  if (phase_ != Phase::forward || open_[module] == 0) {
    throw make_error(ErrorCategory::usage,
                     "post_forward of module '{}' without its pre_forward: each post hook must "
                     "follow the pre hook of the same module in the same pass",
                     registry_.module(module).name);
  }
  open_[module] -= 1;
}

bool PassTracker::enter_backward(std::size_t module, Phase* was) {
  *was = phase_;
  const bool starts = phase_ != Phase::backward;
  if (starts && any_open()) {
    throw make_error(ErrorCategory::usage,
                     "pre_backward of module '{}' while a forward hook is still open: every "
                     "pre_forward needs its post_forward before backward starts",
                     registry_.module(module).name);
  }
  phase_ = Phase::backward;
  open_[module] += 1;
  return starts;
}

void PassTracker::leave_backward(std::size_t module) {
  if (phase_ != Phase::backward || open_[module] == 0) {
    throw make_error(ErrorCategory::usage,
                     "post_backward of module '{}' without its pre_backward: each post hook must "
                     "follow the pre hook of the same module in the same pass",
                     registry_.module(module).name);
  }
  open_[module] -= 1;
}

void PassTracker::require_none_open(const char* call, const char* advice) const {
  for (std::size_t m = 0; m < open_.size(); ++m) {
    if (open_[m] != 0) {
      throw make_error(ErrorCategory::usage,
                       "{} while module '{}' has a pre hook without its post hook: {}", call,
                       registry_.module(m).name, advice);
    }
  }
}

void PassTracker::require_not_backward(const char* call, const char* advice) const {
  if (phase_ == Phase::backward) {
    throw make_error(ErrorCategory::usage, "{} in the middle of a backward pass{}", call, advice);
  }
}

}  // namespace zero::engine
