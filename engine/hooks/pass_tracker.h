// PassTracker: where the caller is in a micro-step, from the hooks it has called: between
// passes, in a forward pass or in a backward pass, and which modules have a pre hook without
// their post hook yet. It refuses the calls that break the order (a post hook without its pre
// hook, backward while a forward hook is open, a call that must come between passes), each
// with the module and what to do instead.
//
// Owns: the phase and the count of open pre hooks per module. Calls nothing. Internal to
// engine/.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/plan/registry.h"

namespace zero::engine {

class PassTracker {
 public:
  enum class Phase { idle, forward, backward };

  explicit PassTracker(const Registry& registry) : registry_(registry) {}

  // A module was registered.
  void add_module() { open_.push_back(0); }

  Phase phase() const noexcept { return phase_; }
  bool any_open() const noexcept;

  // pre_forward of `module`: refused in the middle of a backward pass. True when it starts a
  // forward pass (the phase was idle).
  bool enter_forward(std::size_t module);
  // post_forward of `module`: refused without its pre_forward.
  void leave_forward(std::size_t module);
  // pre_backward of `module`: refused while a forward hook is open. True when it starts the
  // backward pass; `was` is the phase before it.
  bool enter_backward(std::size_t module, Phase* was);
  // post_backward of `module`: refused without its pre_backward.
  void leave_backward(std::size_t module);
  // The micro-step's end (the step): back to idle.
  void end_micro_step() noexcept { phase_ = Phase::idle; }

  // Refuses `call` while a module's pre hook has no post hook; `advice` says what to do.
  void require_none_open(const char* call, const char* advice) const;
  // Refuses `call` in the middle of a backward pass (`advice` ends the message).
  void require_not_backward(const char* call, const char* advice) const;

 private:
  const Registry& registry_;
  Phase phase_ = Phase::idle;
  std::vector<int> open_;  // per module: pre hooks called, post hooks not yet
};

}  // namespace zero::engine
