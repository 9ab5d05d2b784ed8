// The test oracle: each optimizer's update for one element, in double, written straight from
// the formulas in optim/spec.h with none of the kernels' precomputation or vector code. Every
// CPU kernel (per ISA) and the GPU kernel are checked against it.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "optim/spec.h"

namespace zero::optim {

struct ReferenceElement {
  double master = 0.0;
  double state[2] = {0.0, 0.0};
};

// One step of `spec` on one element whose (already loaded, unscaled) gradient is `grad`.
// With `state_dtype` bf16 the new state is rounded as the kernels round it: to fp32, then
// stochastically to bf16 with the bits of element `index` (optim/rounding.h).
void reference_update(const OptimizerSpec& spec, const StepHyper& hyper, double weight_decay,
                      double lr_scale, double grad, DType state_dtype, std::uint64_t index,
                      ReferenceElement& element);

}  // namespace zero::optim
