#include "optim/reference.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

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

// 1 - beta^step. The oracle is called element by element, each with a few steps' two betas, so
// the recent values are kept (std::pow was a third of the optimizer tests' time under the
// sanitizers): a small table indexed by a hash of the arguments, checked on every hit.
double bias_correction(double beta, std::int64_t step) {
  struct Entry {
    double beta = -1.0;  // no beta is negative
    std::int64_t step = 0;
    double value = 0.0;
  };
  thread_local std::array<Entry, 64> recent;
  std::uint64_t bits = 0;
  std::memcpy(&bits, &beta, sizeof bits);
  const std::uint64_t hash =
      (bits ^ (bits >> 29) ^ static_cast<std::uint64_t>(step)) * 0x9e3779b97f4a7c15ull;
  Entry& entry = recent[hash >> 58];
  if (entry.beta != beta || entry.step != step) {
    entry = Entry{beta, step, 1.0 - std::pow(beta, static_cast<double>(step))};
  }
  return entry.value;
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
      const double bc1 = spec.bias_correction ? bias_correction(b1, hyper.step) : 1.0;
      const double bc2 = spec.bias_correction ? bias_correction(b2, hyper.step) : 1.0;
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
