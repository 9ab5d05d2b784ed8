// DeepSpeed's loss-scale rule as a state machine (see engine/stepping/loss_scaler.h).
#include "engine/stepping/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "config/config.h"

namespace zero::engine {
namespace {

constexpr double kScaleFactor = 2.0;  // DeepSpeed's scale_factor, fixed

bool positive_finite(double value) {
  return std::isfinite(value) && value > 0.0;
}

}  // namespace

LossScaler LossScaler::from_config(const config::Fp16Config& fp16) {
  if (!std::isfinite(fp16.loss_scale) || fp16.loss_scale < 0.0) {
    throw make_error(ErrorCategory::config,
                     "fp16.loss_scale: expected 0 (dynamic) or a positive finite scale, got {}",
                     fp16.loss_scale);
  }
  if (!fp16.dynamic()) return fixed(fp16.loss_scale);

  if (fp16.initial_scale_power < 0 || fp16.initial_scale_power > 1023) {
    throw make_error(ErrorCategory::config,
                     "fp16.initial_scale_power: expected 0..1023 (the initial loss scale is "
                     "2^power), got {}",
                     fp16.initial_scale_power);
  }
  if (fp16.loss_scale_window < 1) {
    throw make_error(ErrorCategory::config, "fp16.loss_scale_window: expected >= 1, got {}",
                     fp16.loss_scale_window);
  }
  if (fp16.hysteresis < 1) {
    throw make_error(ErrorCategory::config, "fp16.hysteresis: expected >= 1, got {}",
                     fp16.hysteresis);
  }
  if (!positive_finite(fp16.min_loss_scale)) {
    throw make_error(ErrorCategory::config,
                     "fp16.min_loss_scale: expected a positive finite scale, got {}",
                     fp16.min_loss_scale);
  }

  LossScaler scaler;
  scaler.dynamic_ = true;
  scaler.window_ = fp16.loss_scale_window;
  scaler.hysteresis_ = fp16.hysteresis;
  scaler.consecutive_hysteresis_ = fp16.consecutive_hysteresis;
  scaler.min_scale_ = fp16.min_loss_scale;
  scaler.state_.scale = std::ldexp(1.0, static_cast<int>(fp16.initial_scale_power));
  scaler.state_.hysteresis_left = fp16.hysteresis;
  return scaler;
}

LossScaler LossScaler::fixed(double scale) {
  if (!positive_finite(scale)) {
    throw make_error(ErrorCategory::usage,
                     "LossScaler::fixed: expected a positive finite scale, got {}", scale);
  }
  LossScaler scaler;
  scaler.state_.scale = scale;
  return scaler;
}

bool LossScaler::update(bool overflow) {
  LossScalerState& s = state_;
  if (!dynamic_) {
    if (overflow) s.last_overflow_iteration = s.iteration;
    ++s.iteration;
    return overflow;
  }

  if (overflow) {
    if (hysteresis_ == 1 || s.hysteresis_left == 1) {
      if (s.scale == min_scale_) {
        throw make_error(
            ErrorCategory::config,
            "fp16 gradients overflowed at iteration {} with the loss scale already at "
            "fp16.min_loss_scale ({}); it cannot be lowered further, so the run stops here as "
            "DeepSpeed's does (\"Current loss scale already at minimum\"). The gradients are "
            "inf/nan even at the smallest scale allowed: lower the learning rate, check the data "
            "and the model for inf/nan, or train in bf16",
            s.iteration, s.scale);
      }
      s.scale = std::max(s.scale / kScaleFactor, min_scale_);
    } else {
      --s.hysteresis_left;
    }
    s.last_overflow_iteration = s.iteration;
  } else {
    if (consecutive_hysteresis_) s.hysteresis_left = hysteresis_;
    const std::int64_t stable = s.iteration - s.last_overflow_iteration - 1;
    if (stable > 0 && stable % window_ == 0) {
      if (!consecutive_hysteresis_) s.hysteresis_left = hysteresis_;
      s.scale *= kScaleFactor;
    }
  }
  ++s.iteration;
  return overflow;
}

void LossScaler::restore(const LossScalerState& state) {
  if (!positive_finite(state.scale)) {
    throw make_error(ErrorCategory::usage,
                     "loss scaler state: scale must be positive and finite, got {}", state.scale);
  }
  if (state.iteration < 0) {
    throw make_error(ErrorCategory::usage, "loss scaler state: iteration must be >= 0, got {}",
                     state.iteration);
  }
  if (state.last_overflow_iteration < -1 || state.last_overflow_iteration >= state.iteration) {
    throw make_error(ErrorCategory::usage,
                     "loss scaler state: last_overflow_iteration must be -1 (none) or an earlier "
                     "iteration than {}, got {}",
                     state.iteration, state.last_overflow_iteration);
  }
  if (state.hysteresis_left < 1 || state.hysteresis_left > hysteresis_) {
    throw make_error(ErrorCategory::config,
                     "loss scaler state: hysteresis_left {} is outside 1..{} (fp16.hysteresis); "
                     "the state was saved under different fp16 settings",
                     state.hysteresis_left, hysteresis_);
  }
  if (!dynamic_ && state.scale != state_.scale) {
    throw make_error(ErrorCategory::config,
                     "loss scaler state: saved scale {} differs from this run's static scale {}; "
                     "the state was saved under different fp16 settings",
                     state.scale, state_.scale);
  }
  state_ = state;
}

}  // namespace zero::engine
