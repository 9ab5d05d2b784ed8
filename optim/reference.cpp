#include "optim/reference.h"

#include <cmath>

#include "base/half.h"
#include "optim/rounding.h"

namespace zero::optim {
namespace {

// The state as the kernels store it: fp32, or bf16 rounded stochastically.
double store_state(double value, DType state_dtype, std::uint32_t random16) {
  const float f = static_cast<float>(value);
  if (state_dtype == DType::bf16) return bf16_to_float(float_to_bf16_stochastic(f, random16));
  return f;
}

double sign(double x) {
  return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : 0.0;
}

}  // namespace

void reference_update(const OptimizerSpec& spec, const StepHyper& hyper, double weight_decay,
                      double lr_scale, double grad, DType state_dtype, std::uint64_t index,
                      ReferenceElement& e) {
  const double lr = hyper.lr * lr_scale;
  const double b1 = hyper.beta1, b2 = hyper.beta2;
  const std::uint32_t bits =
      rounding_bits(rounding_key(hyper.seed, hyper.step, static_cast<std::uint32_t>(index >> 32)),
                    static_cast<std::uint32_t>(index));
  const std::uint32_t random0 = bits & 0xffffu, random1 = bits >> 16;
  double g = grad * hyper.grad_scale;
  double& p = e.master;
  switch (spec.type) {
    case OptimizerType::adam:
    case OptimizerType::adamw: {
      if (spec.type == OptimizerType::adam) g += weight_decay * p;
      const double m = b1 * e.state[0] + (1.0 - b1) * g;
      const double v = b2 * e.state[1] + (1.0 - b2) * g * g;
      const double t = static_cast<double>(hyper.step);
      const double bc1 = spec.bias_correction ? 1.0 - std::pow(b1, t) : 1.0;
      const double bc2 = spec.bias_correction ? 1.0 - std::pow(b2, t) : 1.0;
      if (spec.type == OptimizerType::adamw) p -= lr * weight_decay * p;
      p -= (lr / bc1) * m / (std::sqrt(v) / std::sqrt(bc2) + spec.eps);
      e.state[0] = store_state(m, state_dtype, random0);
      e.state[1] = store_state(v, state_dtype, random1);
      break;
    }
    case OptimizerType::adagrad: {
      g += weight_decay * p;
      const double v = e.state[0] + g * g;
      p -= lr * g / (std::sqrt(v) + spec.eps);
      e.state[0] = store_state(v, state_dtype, random0);
      break;
    }
    case OptimizerType::lion: {
      const double c = b1 * e.state[0] + (1.0 - b1) * g;
      p = p - lr * weight_decay * p - lr * sign(c);
      e.state[0] = store_state(b2 * e.state[0] + (1.0 - b2) * g, state_dtype, random0);
      break;
    }
    case OptimizerType::sgd: {
      g += weight_decay * p;
      if (spec.momentum != 0.0) {
        const double buf =
            hyper.step == 1 ? g : spec.momentum * e.state[0] + (1.0 - spec.dampening) * g;
        g = spec.nesterov ? g + spec.momentum * buf : buf;
        e.state[0] = store_state(buf, state_dtype, random0);
      }
      p -= lr * g;
      break;
    }
  }
}

}  // namespace zero::optim
