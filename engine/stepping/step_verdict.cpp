// StepVerdict (see step_verdict.h).
#include "engine/stepping/step_verdict.h"

#include "base/error.h"
#include "engine/plan/memory_plan.h"
#include "optim/spec.h"

namespace zero::engine {

StepVerdict::StepVerdict(Device& device)
    : device_(device),
      slot_(static_cast<float*>(device.reserve(Tier::pinned, kScratchBytes))),
      copied_(device.create_event()) {}

StepVerdict::~StepVerdict() {
  // The copy into the slot may still be in flight.
  if (pending_) copied_->synchronize();
  device_.unreserve(Tier::pinned, slot_, kScratchBytes);
}

std::size_t StepVerdict::pinned_bytes() noexcept {
  return kScratchBytes;
}

void StepVerdict::queue(const float* scalars, Stream& stream, const Step& step) {
  if (pending_) {
    throw make_error(ErrorCategory::internal,
                     "step {}'s verdict queued while step {}'s is still pending", step.global_step,
                     pending_->global_step);
  }
  device_.copy_async(slot_, scalars, 2 * sizeof(float), stream);
  copied_->record(stream);
  pending_ = step;
}

std::optional<StepVerdict::Outcome> StepVerdict::take() {
  if (!pending_) return std::nullopt;
  copied_->synchronize();
  Outcome outcome;
  outcome.step = *pending_;
  pending_.reset();
  const float* host = static_cast<const float*>(device_.host_alias(slot_));
  outcome.skipped = host[1] != 0.0f;
  if (!outcome.skipped) outcome.grad_norm = optim::unscaled_norm(host[0], outcome.step.loss_scale);
  return outcome;
}

}  // namespace zero::engine
