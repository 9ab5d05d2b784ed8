// The test oracle for fp16 dynamic loss scaling: DeepSpeed's DynamicLossScaler.update_scale
// (deepspeed/runtime/fp16/loss_scaler.py, deepspeedai @ 68ee9f83) transcribed line by line in
// C++ with DeepSpeed's names, logging left out. It is this file's own reading of the Python and
// shares no code with engine/stepping/loss_scaler.h, the class it checks.
//
// Used by tests/engine/test_loss_scaler.cpp (the scaler class alone, state for state) and by
// tests/multirank/engine_loss_scale.cpp (the whole engine through the C API, step by step).
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/stepping/loss_scaler.h"

namespace zero_test {

using zero::engine::LossScalerState;

struct DeepSpeedDynamicLossScaler {
  struct MinimumReached {};  // raise Exception("Current loss scale already at minimum ...")

  double cur_scale;
  std::int64_t cur_iter = 0;
  std::int64_t last_overflow_iter = -1;
  double scale_factor = 2.0;
  std::int64_t scale_window;
  double min_scale;
  std::int64_t delayed_shift;
  std::int64_t cur_hysteresis;
  bool consecutive_hysteresis;
  bool raise_error_at_min_scale = true;

  DeepSpeedDynamicLossScaler(double init_scale, std::int64_t scale_window_, double min_scale_,
                             std::int64_t delayed_shift_, bool consecutive_hysteresis_)
      : cur_scale(init_scale),
        scale_window(scale_window_),
        min_scale(min_scale_),
        delayed_shift(delayed_shift_),
        cur_hysteresis(delayed_shift_),
        consecutive_hysteresis(consecutive_hysteresis_) {}

  void update_scale(bool overflow) {
    if (overflow) {
      if (delayed_shift == 1 || cur_hysteresis == 1) {
        if (cur_scale == min_scale && raise_error_at_min_scale) {
          throw MinimumReached{};
        } else {
          const double next_scale = std::max(cur_scale / scale_factor, min_scale);
          cur_scale = next_scale;
        }
      } else {
        cur_hysteresis -= 1;
      }
      last_overflow_iter = cur_iter;
    } else {
      if (consecutive_hysteresis) {
        cur_hysteresis = delayed_shift;
      }
      const std::int64_t stable_interval = (cur_iter - last_overflow_iter) - 1;
      if (stable_interval > 0 && stable_interval % scale_window == 0) {
        if (!consecutive_hysteresis) {
          cur_hysteresis = delayed_shift;
        }
        cur_scale *= scale_factor;
      }
    }
    cur_iter += 1;
  }

  LossScalerState state() const {
    return {cur_scale, cur_hysteresis, cur_iter, last_overflow_iter};
  }
};

}  // namespace zero_test
