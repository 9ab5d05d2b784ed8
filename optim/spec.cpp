#include "optim/spec.h"

#include <cmath>

#include "base/error.h"

namespace zero::optim {

std::string_view optimizer_type_name(OptimizerType type) noexcept {
  switch (type) {
    case OptimizerType::adam:
      return "Adam (L2 weight decay)";
    case OptimizerType::adamw:
      return "AdamW";
    case OptimizerType::adagrad:
      return "Adagrad";
    case OptimizerType::lion:
      return "Lion";
    case OptimizerType::sgd:
      return "SGD";
  }
  return "unknown";
}

std::string_view optimizer_key(OptimizerType type) noexcept {
  switch (type) {
    case OptimizerType::adam:
      return "adam";
    case OptimizerType::adamw:
      return "adamw";
    case OptimizerType::adagrad:
      return "adagrad";
    case OptimizerType::lion:
      return "lion";
    case OptimizerType::sgd:
      return "sgd";
  }
  return "?";
}

std::string_view state_name(OptimizerType type, int k) noexcept {
  switch (type) {
    case OptimizerType::adam:
    case OptimizerType::adamw:
      return k == 0 ? "exp_avg" : "exp_avg_sq";
    case OptimizerType::adagrad:
      return "sum";
    case OptimizerType::lion:
      return "exp_avg";
    case OptimizerType::sgd:
      return "momentum_buffer";
  }
  return "?";
}

int OptimizerSpec::state_buffers() const noexcept {
  switch (type) {
    case OptimizerType::adam:
    case OptimizerType::adamw:
      return 2;
    case OptimizerType::adagrad:
    case OptimizerType::lion:
      return 1;
    case OptimizerType::sgd:
      return momentum != 0.0 ? 1 : 0;
  }
  return 0;
}

void validate(const OptimizerSpec& spec, const Formats& formats) {
  const auto is_float = [](DType d) {
    return d == DType::f32 || d == DType::bf16 || d == DType::f16;
  };
  if (!is_float(formats.grad)) {
    throw make_error(ErrorCategory::config,
                     "optimizer: gradients of dtype {} cannot be stepped; "
                     "use fp32, bf16 or fp16",
                     dtype_name(formats.grad));
  }
  if (formats.state != DType::f32 && formats.state != DType::bf16) {
    throw make_error(ErrorCategory::config,
                     "optimizer: {} state of dtype {} is not supported; "
                     "use fp32 or bf16",
                     optimizer_type_name(spec.type), dtype_name(formats.state));
  }
  if (formats.param_out != DType::bf16 && formats.param_out != DType::f16) {
    throw make_error(ErrorCategory::config,
                     "optimizer: the parameter copy-out must be bf16 or "
                     "fp16, not {}",
                     dtype_name(formats.param_out));
  }
}

double unscaled_norm(float sum_squares, double loss_scale) {
  return std::sqrt(static_cast<double>(sum_squares)) / loss_scale;
}

double step_grad_scale(double norm, double loss_scale, double max_norm) {
  double grad_scale = 1.0 / loss_scale;
  if (max_norm > 0.0) {
    const double clip = (norm + 1e-6) / max_norm;  // DeepSpeed's coefficient
    if (clip > 1.0) grad_scale /= clip;
  }
  return grad_scale;
}

bool apply_verdict(StepHyper& hyper) {
  if (hyper.verdict == nullptr) return true;
  const float sum = hyper.verdict[0];
  const float nonfinite = hyper.verdict[1];
  hyper.verdict = nullptr;
  if (nonfinite != 0.0f) return false;
  hyper.grad_scale =
      step_grad_scale(unscaled_norm(sum, hyper.loss_scale), hyper.loss_scale, hyper.max_norm);
  return true;
}

}  // namespace zero::optim
