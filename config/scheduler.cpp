// scheduler: DeepSpeed's five LR schedules with their parameters and defaults. Required
// parameters (WarmupDecayLR's total_num_steps, OneCycle's cycle_min_lr and cycle_max_lr)
// are errors when missing or left "auto" with nothing to supply them.
#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "config/sections.h"

namespace zero::config {
namespace {

constexpr RealRange kAnyLr{0.0, INFINITY};
constexpr RealRange kRatio{0.0, 1.0};

// PyTorch's schedulers, which DeepSpeed would accept by name and zero does not offer.
constexpr std::array<std::string_view, 15> kTorchSchedulers{"StepLR",
                                                            "MultiStepLR",
                                                            "ExponentialLR",
                                                            "CosineAnnealingLR",
                                                            "LambdaLR",
                                                            "MultiplicativeLR",
                                                            "ReduceLROnPlateau",
                                                            "CyclicLR",
                                                            "OneCycleLR",
                                                            "CosineAnnealingWarmRestarts",
                                                            "LinearLR",
                                                            "ConstantLR",
                                                            "SequentialLR",
                                                            "ChainedScheduler",
                                                            "PolynomialLR"};

WarmupType read_warmup_type(Section& params) {
  return params.choice({"warmup_type"}, "log", {"log", "linear"}) == "linear" ? WarmupType::linear
                                                                              : WarmupType::log;
}

void warn_if_short(Section& params, const SchedulerConfig& s) {
  if (s.total_num_steps > 0 && s.total_num_steps < s.warmup_num_steps) {
    params.reader().warning(fmt::format(
        "scheduler.params.total_num_steps ({}) is below warmup_num_steps ({}): the schedule "
        "never leaves its warmup",
        s.total_num_steps, s.warmup_num_steps));
  }
}

}  // namespace

void read_scheduler(Section& root, Config& config) {
  Reader& reader = root.reader();
  Section section = root.child("scheduler");
  SchedulerConfig& s = config.scheduler;
  const json* type = section.raw("type");
  if (!section.present()) {
    reader.record("scheduler.type", "none", Source::default_value, "constant learning rate");
    return;
  }
  static constexpr std::array<std::pair<std::string_view, SchedulerType>, 5> kNames{{
      {"WarmupLR", SchedulerType::warmup_lr},
      {"WarmupDecayLR", SchedulerType::warmup_decay_lr},
      {"WarmupCosineLR", SchedulerType::warmup_cosine_lr},
      {"OneCycle", SchedulerType::one_cycle},
      {"LRRangeTest", SchedulerType::lr_range_test},
  }};
  if (type == nullptr || !type->is_string()) {
    reader.error(fmt::format(
        "scheduler.type: expected one of \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\", "
        "\"OneCycle\", \"LRRangeTest\", got {}",
        type == nullptr ? "nothing (the key is required)" : describe(*type)));
    return;
  }
  const std::string name = type->get<std::string>();
  const auto known = std::find_if(kNames.begin(), kNames.end(),
                                  [&](const auto& entry) { return entry.first == name; });
  if (known == kNames.end()) {
    if (std::find(kTorchSchedulers.begin(), kTorchSchedulers.end(), name) !=
        kTorchSchedulers.end()) {
      reader.error(fmt::format(
          "scheduler.type: PyTorch's \"{}\" is not supported by zero; use one of WarmupLR, "
          "WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest",
          name));
    } else {
      std::string nearest;
      std::size_t best = SIZE_MAX;
      for (const auto& [candidate, ignored] : kNames) {
        const std::size_t distance = edit_distance(fold_case(name), fold_case(candidate));
        if (distance < best) best = distance, nearest = candidate;
      }
      reader.error(fmt::format(
          "scheduler.type: unknown scheduler \"{}\"{}; zero offers WarmupLR, WarmupDecayLR, "
          "WarmupCosineLR, OneCycle, LRRangeTest",
          name, best <= 3 ? fmt::format(" (did you mean {}?)", nearest) : ""));
    }
    return;
  }
  s.type = known->second;
  reader.record("scheduler.type", name,
                reader.is_overridden("scheduler.type") ? Source::override_value : Source::file);

  Section params = section.child("params");
  s.last_batch_iteration = params.integer({"last_batch_iteration"}, -1, {-1, INT64_MAX});
  switch (s.type) {
    case SchedulerType::warmup_lr: {
      s.warmup_min_lr = params.real({"warmup_min_lr"}, 0.0, kAnyLr);
      // DeepSpeed's newest WarmupLR warms up to the optimizer's lr when no maximum is given.
      const json* max_lr = params.raw("warmup_max_lr");
      if (max_lr == nullptr || max_lr->is_null() || is_auto(*max_lr)) {
        s.warmup_max_lr = config.optimizer.lr;
        reader.record("scheduler.params.warmup_max_lr", s.warmup_max_lr, Source::derived,
                      "the optimizer's lr");
      } else {
        s.warmup_max_lr = params.real({"warmup_max_lr"}, config.optimizer.lr, kAnyLr);
      }
      s.warmup_num_steps = params.integer({"warmup_num_steps"}, 1000, kPositive);
      s.warmup_type = read_warmup_type(params);
      break;
    }
    case SchedulerType::warmup_decay_lr: {
      s.warmup_min_lr = params.real({"warmup_min_lr"}, 0.0, kAnyLr);
      if (const json* max_lr = params.raw("warmup_max_lr"); max_lr != nullptr && is_auto(*max_lr)) {
        // Hugging Face fills an "auto" maximum with the learning rate.
        s.warmup_max_lr = config.optimizer.lr;
        reader.record("scheduler.params.warmup_max_lr", s.warmup_max_lr, Source::derived,
                      "\"auto\": the optimizer's lr");
      } else {
        s.warmup_max_lr = params.real({"warmup_max_lr"}, 1e-3, kAnyLr);
      }
      s.warmup_num_steps = params.integer({"warmup_num_steps"}, 1000, kPositive);
      s.warmup_type = read_warmup_type(params);
      s.total_num_steps = params.required_integer("total_num_steps", kPositive).value_or(0);
      warn_if_short(params, s);
      break;
    }
    case SchedulerType::warmup_cosine_lr: {
      s.total_num_steps = params.required_integer("total_num_steps", kPositive).value_or(0);
      s.warmup_min_ratio = params.real({"warmup_min_ratio"}, 0.0, kRatio);
      s.warmup_num_steps = params.integer({"warmup_num_steps"}, 1000, kPositive);
      s.cos_min_ratio = params.real({"cos_min_ratio"}, 1e-4, kRatio);
      s.warmup_type = read_warmup_type(params);
      warn_if_short(params, s);
      break;
    }
    case SchedulerType::one_cycle: {
      s.cycle_min_lr = params.required_real("cycle_min_lr", kAnyLr).value_or(0.0);
      s.cycle_max_lr = params.required_real("cycle_max_lr", kAnyLr).value_or(0.0);
      s.decay_lr_rate = params.real({"decay_lr_rate"}, 0.0, {0.0, INFINITY});
      s.cycle_first_step_size = params.integer({"cycle_first_step_size"}, 2000, kPositive);
      s.cycle_second_step_size =
          params.integer({"cycle_second_step_size"}, s.cycle_first_step_size, kPositive);
      s.cycle_first_stair_count = params.integer({"cycle_first_stair_count"}, 0);
      s.cycle_second_stair_count =
          params.integer({"cycle_second_stair_count"}, s.cycle_first_stair_count);
      s.decay_step_size = params.integer({"decay_step_size"}, 0);
      s.cycle_momentum = params.boolean({"cycle_momentum"}, true);
      s.cycle_min_mom = params.real({"cycle_min_mom"}, 0.8, {0.0, 1.0});
      s.cycle_max_mom = params.real({"cycle_max_mom"}, 0.9, {0.0, 1.0});
      s.decay_mom_rate = params.real({"decay_mom_rate"}, 0.0, {0.0, INFINITY});
      if (s.cycle_max_lr < s.cycle_min_lr) {
        reader.error(
            fmt::format("scheduler.params.cycle_max_lr ({}) is below cycle_min_lr ({}); swap them",
                        s.cycle_max_lr, s.cycle_min_lr));
      }
      if (s.cycle_momentum && !config.optimizer.has_betas()) {
        reader.warning(fmt::format(
            "scheduler.params.cycle_momentum: {} has no betas to cycle; momentum cycling is off "
            "(as in DeepSpeed)",
            optimizer_name(config.optimizer.type)));
        s.cycle_momentum = false;
        reader.record("scheduler.params.cycle_momentum", false, Source::derived,
                      "the optimizer has no betas");
      }
      break;
    }
    case SchedulerType::lr_range_test:
      s.lr_range_test_min_lr = params.real({"lr_range_test_min_lr"}, 1e-3, kAnyLr);
      s.lr_range_test_step_size = params.integer({"lr_range_test_step_size"}, 2000, kPositive);
      s.lr_range_test_step_rate = params.real({"lr_range_test_step_rate"}, 1.0, {0.0, INFINITY});
      s.lr_range_test_staircase = params.boolean({"lr_range_test_staircase"}, false);
      break;
    case SchedulerType::none:
      break;
  }
  params.finish();
  section.finish();
}

}  // namespace zero::config
