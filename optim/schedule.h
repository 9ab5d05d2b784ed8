// DeepSpeed's learning-rate schedules as pure functions of the iteration: WarmupLR,
// WarmupDecayLR, WarmupCosineLR, OneCycle (with momentum cycling) and LRRangeTest, with
// DeepSpeed's formulas, defaults and quirks (see README, "Learning-rate schedules").
//
// Iterations follow DeepSpeed's last_batch_iteration: t = -1 before the first scheduler step,
// and the scheduler steps after each optimizer step. So the k-th optimizer step of a run
// (k = 1, 2, ...) that starts from last_batch_iteration L uses the values at t = L + k - 1:
// a fresh run's first step uses t = -1, its second t = 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace zero::optim {

enum class ScheduleType {
  none,
  warmup_lr,
  warmup_decay_lr,
  warmup_cosine_lr,
  one_cycle,
  lr_range_test
};
enum class WarmupType { log, linear };

std::string_view schedule_type_name(ScheduleType type) noexcept;  // DeepSpeed's: "WarmupLR"...

// DeepSpeed's scheduler.params, resolved (config reads them into this).
struct ScheduleSpec {
  ScheduleType type = ScheduleType::none;
  std::int64_t last_batch_iteration = -1;
  // WarmupLR, WarmupDecayLR, WarmupCosineLR
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 1e-3;
  std::int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::log;
  std::int64_t total_num_steps = 0;
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 1e-4;
  // OneCycle
  double cycle_min_lr = 0.0;
  double cycle_max_lr = 0.0;
  double decay_lr_rate = 0.0;
  std::int64_t cycle_first_step_size = 2000;
  std::int64_t cycle_second_step_size = 2000;
  std::int64_t cycle_first_stair_count = 0;
  std::int64_t cycle_second_stair_count = 0;
  std::int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
  // LRRangeTest
  double lr_range_test_min_lr = 1e-3;
  std::int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

struct ScheduleValue {
  double lr = 0.0;
  // Set only by OneCycle with cycle_momentum: the betas it writes, (momentum, 0.99) as
  // DeepSpeed does (its second beta is fixed at 0.99 whatever the optimizer's was).
  std::optional<double> beta1;
  std::optional<double> beta2;
};

// The values at iteration t (t >= -1). `base_lr` is the optimizer's lr: WarmupCosineLR scales
// it, ScheduleType::none returns it, the others ignore it.
ScheduleValue schedule_at(const ScheduleSpec& spec, std::int64_t t, double base_lr);

// The t that the k-th optimizer step (k >= 1) of a run uses: last_batch_iteration + k - 1.
inline std::int64_t schedule_iteration(const ScheduleSpec& spec, std::int64_t k) noexcept {
  return spec.last_batch_iteration + k - 1;
}

}  // namespace zero::optim
