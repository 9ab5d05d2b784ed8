// StepVerdict: a step's verdict left on the device. Where the optimizer runs on the engine's
// device (not offloaded) and no fp16 loss scale waits on it, the Stepper queues the non-finite
// check, the norm's sum of squares and their reductions across the shard group on the device's
// stream, and the optimizer reads them there when it runs (optim::StepHyper::verdict): the host
// never waits between backward and the optimizer. After the step's work the two scalars are
// copied into pinned memory; the host reads them (take) only when it next needs the verdict: the
// next boundary's step, a checkpoint, the step's statistics asked for.
//
// Owns: the pinned slot (kScratchBytes, outside the arenas: Engine::reserved_bytes counts it),
// the event after its copy, and what the host knew of the pending step. Internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "device/device.h"

namespace zero::engine {

class StepVerdict {
 public:
  explicit StepVerdict(Device& device);
  ~StepVerdict();
  StepVerdict(const StepVerdict&) = delete;
  StepVerdict& operator=(const StepVerdict&) = delete;

  // What the host knew of a step when it queued it.
  struct Step {
    std::int64_t global_step = 0;     // its number, skipped ones counted
    std::int64_t optimizer_step = 0;  // the optimizer's count it took, were it not skipped
    double loss_scale = 1.0;
  };
  // The verdict as the host reads it.
  struct Outcome {
    Step step;
    bool skipped = false;
    double grad_norm = 0.0;  // of the unscaled gradients; 0 when skipped
  };

  // After the step's work on `stream`: copies scalars[0] (sum of squares) and scalars[1] (the
  // non-finite flag), device memory, into the pinned slot. At most one step is pending.
  void queue(const float* scalars, Stream& stream, const Step& step);
  bool pending() const noexcept { return pending_.has_value(); }
  // The pending step's verdict, waiting for its copy; nullopt when none is pending.
  std::optional<Outcome> take();
  // The pinned bytes it holds.
  static std::size_t pinned_bytes() noexcept;

 private:
  Device& device_;
  float* slot_;  // pinned: [0] sum of squares, [1] non-finite flag
  std::unique_ptr<Event> copied_;
  std::optional<Step> pending_;
};

}  // namespace zero::engine
