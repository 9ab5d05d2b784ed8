// The Stepper's step-group machinery as its super_offload part (speculation.h) calls it: the
// slices over the owned shards, a step's hyperparameters, where a group's updated values are
// written and how they are placed. Implemented by the Stepper. Internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/device.h"
#include "engine/state/optimizer_swap.h"
#include "optim/optimizer.h"

namespace zero::engine {

// Where a step group's state is for its step: resident in memory, or a swapped group's view.
struct GroupState {
  bool swapped = false;
  GroupView view;
  const void* grad = nullptr;  // gradient NVMe: the group's gradient, from the GradSwap
  // The updated compute values are in the staging (`out`), also in fp32: a swapped group's
  // speculated step that stood, whose masters are on NVMe.
  bool staged = false;
};

class StepGroups {
 public:
  virtual ~StepGroups() = default;
  // One per trainable parameter, over its owned shard.
  virtual std::vector<optim::Slice> slices() = 0;
  // The k-th optimizer step's (k >= 1) hyperparameters with this gradient scale.
  virtual optim::StepHyper hyper_for(std::int64_t k, double grad_scale) const = 0;
  // Where the optimizer writes this group's half copies (null: each slice's own param_out).
  virtual char* out_of(std::size_t group) = 0;
  // This group's pieces as the optimizer takes them.
  virtual std::vector<optim::Slice> pieces(std::size_t group, const std::vector<optim::Slice>& all,
                                           const GroupState& where, char* out) = 0;
  // The updated values the optimizer did not write in place, to where they live.
  virtual void place(std::size_t group, const std::vector<optim::Slice>& all,
                     const GroupState& where, char* out, Stream& stream) = 0;
  // The owned gradient shard where host code reaches it.
  virtual const void* owned_grad_on_host() const = 0;
};

}  // namespace zero::engine
