// DeepSpeed's learning-rate schedules evaluated at one iteration t (see optim/schedule.h).
// One helper per schedule. t = -1 gives what a fresh run's first optimizer step runs with: the
// value DeepSpeed's scheduler writes into the optimizer when it is constructed.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace zero::optim {
namespace {

// The warmup length DeepSpeed uses: at least 2, so that ln(W) > 0.
double warmup_steps(const ScheduleSpec& spec) {
  return static_cast<double>(std::max<std::int64_t>(2, spec.warmup_num_steps));
}

// The warmup fraction at 0 <= t < W: ln(t + 1) / ln(W) or t / W.
double warmup_fraction(const ScheduleSpec& spec, double t, double w) {
  if (spec.warmup_type == WarmupType::linear) return t / w;
  return std::log(t + 1.0) * (1.0 / std::log(w));
}

// WarmupLR and WarmupDecayLR: min + (max - min) * gamma. Before the first scheduler step
// (t < 0) DeepSpeed writes warmup_min_lr into the optimizer.
double warmup_lr(const ScheduleSpec& spec, std::int64_t t, bool decay) {
  if (t < 0) return spec.warmup_min_lr;
  const double w = warmup_steps(spec);
  const double tt = static_cast<double>(t);
  double gamma = 1.0;
  if (tt < w) {
    gamma = warmup_fraction(spec, tt, w);
  } else if (decay) {
    const double total = static_cast<double>(spec.total_num_steps);
    gamma = std::max(0.0, (total - tt) / std::max(1.0, total - w));
  }
  return spec.warmup_min_lr + (spec.warmup_max_lr - spec.warmup_min_lr) * gamma;
}

// WarmupCosineLR: base_lr * ratio; the ratio warms up from warmup_min_ratio to 1, then follows
// a half cosine down to cos_min_ratio and stays there. Before the first step the ratio is 0:
// DeepSpeed writes lr 0 into the optimizer at construction.
double warmup_cosine_lr(const ScheduleSpec& spec, std::int64_t t, double base_lr) {
  if (t < 0) return 0.0;
  const double w = warmup_steps(spec);
  const double tt = static_cast<double>(t);
  double ratio;
  if (tt < w) {
    ratio = spec.warmup_min_ratio + warmup_fraction(spec, tt, w) * (1.0 - spec.warmup_min_ratio);
  } else {
    const double total = static_cast<double>(spec.total_num_steps);
    const double progress = std::min(1.0, (tt - w + 1.0) / std::max(1.0, total - w));
    const double c = spec.cos_min_ratio;
    ratio = std::max(0.0, c + (1.0 - c) * ((1.0 + std::cos(std::numbers::pi * progress)) / 2.0));
  }
  return base_lr * ratio;
}

// OneCycle: one triangular cycle of lr (momentum moving the other way), then decay.
ScheduleValue one_cycle(const ScheduleSpec& spec, std::int64_t t) {
  ScheduleValue v;
  const double first = static_cast<double>(spec.cycle_first_step_size);
  const double size = std::max(1.0, first + static_cast<double>(spec.cycle_second_step_size));
  const double tt = static_cast<double>(t);
  double beta1;
  if (tt < size) {
    // Position x in [0, 1) within the cycle; f rises 0 -> 1 over the first part, then falls.
    const double step_ratio = first / size;
    const double b = tt + 1.0;
    const double cycle = std::floor(1.0 + b / size);
    const double x = 1.0 + b / size - cycle;
    double f;
    if (x <= step_ratio) {
      f = step_ratio > 0.0 ? x / step_ratio : 1.0;
    } else {
      f = (x - 1.0) / (step_ratio - 1.0);
    }
    v.lr = spec.cycle_min_lr + (spec.cycle_max_lr - spec.cycle_min_lr) * f;
    beta1 = spec.cycle_max_mom - (spec.cycle_max_mom - spec.cycle_min_mom) * f;
  } else {
    const double d = tt - size + 1.0;  // steps into the decay phase, from 1
    const double step = static_cast<double>(spec.decay_step_size);
    v.lr = (step == 0.0 || spec.decay_lr_rate == 0.0)
               ? spec.cycle_min_lr
               : spec.cycle_min_lr / (1.0 + spec.decay_lr_rate * (d / step));
    beta1 = (step == 0.0 || spec.decay_mom_rate == 0.0)
                ? spec.cycle_max_mom
                : spec.cycle_max_mom * (1.0 + spec.decay_mom_rate * (d / step));
  }
  // Construction writes (cycle_min_mom, 0.99), not the cycle's value at t = -1 (cycle_max_mom).
  if (t < 0) beta1 = spec.cycle_min_mom;
  if (spec.cycle_momentum) {
    v.beta1 = beta1;
    v.beta2 = 0.99;  // DeepSpeed's fixed second beta.
  }
  return v;
}

// LRRangeTest: min_lr * (1 + step_rate * interval), the interval whole (staircase) or not.
double lr_range_test(const ScheduleSpec& spec, std::int64_t t) {
  const double step_size =
      static_cast<double>(std::max<std::int64_t>(1, spec.lr_range_test_step_size));
  double interval = static_cast<double>(t + 1) / step_size;
  if (spec.lr_range_test_staircase) interval = std::floor(interval);
  return spec.lr_range_test_min_lr * (1.0 + spec.lr_range_test_step_rate * interval);
}

// A value that sets the lr only.
ScheduleValue lr_only(double lr) {
  ScheduleValue v;
  v.lr = lr;
  return v;
}

}  // namespace

std::string_view schedule_type_name(ScheduleType type) noexcept {
  switch (type) {
    case ScheduleType::none:
      return "none";
    case ScheduleType::warmup_lr:
      return "WarmupLR";
    case ScheduleType::warmup_decay_lr:
      return "WarmupDecayLR";
    case ScheduleType::warmup_cosine_lr:
      return "WarmupCosineLR";
    case ScheduleType::one_cycle:
      return "OneCycle";
    case ScheduleType::lr_range_test:
      return "LRRangeTest";
  }
  return "unknown";
}

ScheduleValue schedule_at(const ScheduleSpec& spec, std::int64_t t, double base_lr) {
  switch (spec.type) {
    case ScheduleType::none:
      return lr_only(base_lr);
    case ScheduleType::warmup_lr:
      return lr_only(warmup_lr(spec, t, false));
    case ScheduleType::warmup_decay_lr:
      return lr_only(warmup_lr(spec, t, true));
    case ScheduleType::warmup_cosine_lr:
      return lr_only(warmup_cosine_lr(spec, t, base_lr));
    case ScheduleType::one_cycle:
      return one_cycle(spec, t);
    case ScheduleType::lr_range_test:
      return lr_only(lr_range_test(spec, t));
  }
  return lr_only(base_lr);
}

}  // namespace zero::optim
