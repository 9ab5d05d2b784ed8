// fp16 loss scaling as DeepSpeed does it: a pure state machine that the engine feeds one overflow
// flag per optimizer step and that answers with the scale for the next step. No tensors here;
// the engine multiplies the loss by scale(), checks the gradients for inf/nan, and calls update().
//
// The dynamic rule is DeepSpeed's DynamicLossScaler.update_scale
// (deepspeed/runtime/fp16/loss_scaler.py, deepspeedai @ 68ee9f83 and later), step for step:
//   overflow:    if hysteresis == 1 or hysteresis_left == 1: the scale halves, but not below
//                min_loss_scale, and an overflow at min_loss_scale stops the run (an Error);
//                otherwise only hysteresis_left drops by one. Either way the step is skipped.
//   no overflow: consecutive_hysteresis refills hysteresis_left. Let stable = iteration -
//                last_overflow_iteration - 1 (the good steps before this one since the last
//                overflow); when stable > 0 and stable % loss_scale_window == 0 the scale doubles
//                (and, without consecutive_hysteresis, hysteresis_left is refilled there).
//   then iteration += 1.
// So with window w the scale doubles on the (w + 1)-th good step since the last overflow (or the
// start), then on every w-th good step after that. (DeepSpeed releases before this
// stable_interval form tested (iteration - last_overflow_iteration) % w == 0: one step earlier,
// and with w = 1 doubling straight back on the good step after an overflow.)
//
// A static scaler (fp16.loss_scale > 0, or 1.0 for bf16 and fp32) never changes its scale; an
// overflow still skips the step, as DeepSpeed's static fp16 scaler does.
#pragma once

#include <cstdint>

namespace zero::config {
struct Fp16Config;
}

namespace zero::engine {

// Everything a checkpoint must hold for a resumed run to scale exactly as an unbroken one.
struct LossScalerState {
  double scale = 1.0;
  std::int64_t hysteresis_left = 1;           // DeepSpeed's cur_hysteresis: 1..hysteresis
  std::int64_t iteration = 0;                 // update() calls so far (cur_iter)
  std::int64_t last_overflow_iteration = -1;  // -1: none yet (last_overflow_iter)

  bool operator==(const LossScalerState&) const = default;
};

class LossScaler {
 public:
  // From the fp16 section: dynamic when loss_scale == 0 (starting at 2^initial_scale_power),
  // static at loss_scale otherwise. For a run with fp16 enabled; bf16 and fp32 use fixed(1.0).
  // Throws a config Error naming the key when a value is out of range (the config reader
  // already refuses these; this guards hand-built configs).
  static LossScaler from_config(const config::Fp16Config& fp16);

  // A static scale (> 0 and finite, else a usage Error).
  static LossScaler fixed(double scale);

  bool dynamic() const noexcept { return dynamic_; }
  double scale() const noexcept { return state_.scale; }
  const LossScalerState& state() const noexcept { return state_; }

  // Records one optimizer step's outcome and returns true when that step must be skipped, which
  // is exactly when `overflow` is true. An overflow with the dynamic scale already at
  // min_loss_scale throws a config Error (DeepSpeed's "Current loss scale already at minimum -
  // cannot decrease scale anymore. Exiting run.") and leaves the state as it was.
  bool update(bool overflow);

  // Continues from a saved state(). Throws a usage Error when the state is malformed (scale not
  // positive and finite, iteration < 0, last_overflow_iteration outside [-1, iteration)), and a
  // config Error when it cannot have come from these settings (hysteresis_left outside
  // [1, hysteresis]; a static scaler given a different scale). Nothing changes when it throws.
  void restore(const LossScalerState& state);

 private:
  LossScaler() = default;

  bool dynamic_ = false;
  std::int64_t window_ = 1;      // loss_scale_window
  std::int64_t hysteresis_ = 1;  // hysteresis (DeepSpeed's delayed_shift)
  bool consecutive_hysteresis_ = false;
  double min_scale_ = 1.0;  // min_loss_scale
  LossScalerState state_;
};

}  // namespace zero::engine
