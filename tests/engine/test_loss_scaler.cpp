// Tests of engine/stepping/loss_scaler.h: DeepSpeed's dynamic loss-scale rule on short scripts
// worked out by hand (the reasoning is in the comments), and on long random scripts against a
// literal transcription of DeepSpeed's DynamicLossScaler.update_scale; the static scaler; errors;
// and resuming from a saved state.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "config/config.h"
#include "engine/deepspeed_loss_scaler.h"
#include "engine/stepping/loss_scaler.h"

namespace {

using zero::Error;
using zero::ErrorCategory;
using zero::config::Fp16Config;
using zero::engine::LossScaler;
using zero::engine::LossScalerState;
using zero_test::DeepSpeedDynamicLossScaler;

Fp16Config dynamic_config(std::int64_t power, std::int64_t window, std::int64_t hysteresis,
                          bool consecutive, double min_scale) {
  Fp16Config fp16;
  fp16.enabled = true;
  fp16.loss_scale = 0.0;
  fp16.initial_scale_power = power;
  fp16.loss_scale_window = window;
  fp16.hysteresis = hysteresis;
  fp16.consecutive_hysteresis = consecutive;
  fp16.min_loss_scale = min_scale;
  return fp16;
}

DeepSpeedDynamicLossScaler reference_for(const Fp16Config& fp16) {
  return DeepSpeedDynamicLossScaler(std::ldexp(1.0, static_cast<int>(fp16.initial_scale_power)),
                                    fp16.loss_scale_window, fp16.min_loss_scale, fp16.hysteresis,
                                    fp16.consecutive_hysteresis);
}

constexpr bool O = true;   // an overflowing step
constexpr bool G = false;  // a good step

// The scale after each update of `script`; also checks that every update asks for a skip
// exactly on an overflow, and that the reference transcription agrees state for state.
std::vector<double> run_script(const Fp16Config& fp16, const std::vector<bool>& script) {
  LossScaler scaler = LossScaler::from_config(fp16);
  DeepSpeedDynamicLossScaler reference = reference_for(fp16);
  std::vector<double> scales;
  for (std::size_t k = 0; k < script.size(); ++k) {
    INFO("update " << k);
    REQUIRE(scaler.update(script[k]) == script[k]);
    reference.update_scale(script[k]);
    REQUIRE(scaler.state() == reference.state());
    scales.push_back(scaler.scale());
  }
  return scales;
}

std::vector<std::int64_t> hysteresis_after(const Fp16Config& fp16,
                                           const std::vector<bool>& script) {
  LossScaler scaler = LossScaler::from_config(fp16);
  std::vector<std::int64_t> left;
  for (const bool overflow : script) {
    scaler.update(overflow);
    left.push_back(scaler.state().hysteresis_left);
  }
  return left;
}

// Overflow flags from a fixed-seed generator: each step overflows with `percent` percent
// chance. (`rng() % 100` keeps the script the same on every standard library.)
std::vector<bool> random_script(std::mt19937_64& rng, std::size_t length, unsigned percent) {
  std::vector<bool> script(length);
  for (std::size_t k = 0; k < length; ++k) script[k] = rng() % 100 < percent;
  return script;
}

}  // namespace

TEST_CASE("a dynamic scaler starts at 2^initial_scale_power with its full hysteresis", "[engine]") {
  const LossScaler scaler = LossScaler::from_config(Fp16Config{});  // DeepSpeed's defaults
  CHECK(scaler.dynamic());
  CHECK(scaler.scale() == 65536.0);
  CHECK(scaler.state() == LossScalerState{65536.0, 2, 0, -1});

  const LossScaler small = LossScaler::from_config(dynamic_config(0, 5, 3, false, 0.25));
  CHECK(small.scale() == 1.0);
  CHECK(small.state().hysteresis_left == 3);
}

TEST_CASE("with hysteresis 2 the first overflow spends the budget and the second halves",
          "[engine]") {
  const Fp16Config fp16 = dynamic_config(4, 1000, 2, false, 1.0);  // 16
  // Step 0: budget 2 -> 1, scale kept. Step 1: budget is 1, so 16 -> 8 (budget stays 1).
  CHECK(run_script(fp16, {O, O}) == std::vector<double>{16, 8});
  CHECK(hysteresis_after(fp16, {O, O}) == std::vector<std::int64_t>{1, 1});
  // With hysteresis 1 the first overflow halves at once.
  CHECK(run_script(dynamic_config(4, 1000, 1, false, 1.0), {O, O}) == std::vector<double>{8, 4});
}

TEST_CASE("with window 3 the scale doubles on the 4th good step, then every 3rd", "[engine]") {
  const Fp16Config fp16 = dynamic_config(4, 3, 1, false, 1.0);  // 16
  // stable = iteration - last_overflow - 1 = iteration while nothing overflowed: the update at
  // iteration 3 (stable 3) doubles, then iteration 6 (stable 6).
  CHECK(run_script(fp16, {G, G, G, G, G, G, G, G}) ==
        std::vector<double>{16, 16, 16, 32, 32, 32, 64, 64});
  // An overflow at iteration 4 halves to 16 and restarts the count: stable is 0 at iteration 5
  // and 3 at iteration 8, which doubles.
  CHECK(run_script(fp16, {G, G, G, G, O, G, G, G, G, G}) ==
        std::vector<double>{16, 16, 16, 32, 16, 16, 16, 16, 32, 32});
}

TEST_CASE("with window 1 the scale does not double on the good step right after an overflow",
          "[engine]") {
  // Iteration 0 overflows (16 -> 8); iteration 1 has stable 0, so no doubling; iteration 2 has
  // stable 1 and doubles, and so does every good step after it.
  CHECK(run_script(dynamic_config(4, 1, 1, false, 1.0), {O, G, G, G}) ==
        std::vector<double>{8, 8, 16, 32});
}

TEST_CASE("consecutive_hysteresis refills the budget on every good step, else on doublings",
          "[engine]") {
  // Window 1000: no doubling happens, so only consecutive_hysteresis can refill.
  // Without it: O spends 2 -> 1, G leaves 1, O halves 16 -> 8.
  // With it:    O spends 2 -> 1, G refills to 2, O spends 2 -> 1 again and the scale stays 16.
  const std::vector<bool> script = {O, G, O};
  const std::vector<double> without = run_script(dynamic_config(4, 1000, 2, false, 1.0), script);
  const std::vector<double> with = run_script(dynamic_config(4, 1000, 2, true, 1.0), script);
  CHECK(without == std::vector<double>{16, 16, 8});
  CHECK(with == std::vector<double>{16, 16, 16});
  CHECK(without != with);
  CHECK(hysteresis_after(dynamic_config(4, 1000, 2, false, 1.0), script) ==
        std::vector<std::int64_t>{1, 1, 1});
  CHECK(hysteresis_after(dynamic_config(4, 1000, 2, true, 1.0), script) ==
        std::vector<std::int64_t>{1, 2, 1});

  // Without consecutive_hysteresis a doubling refills: window 2, O at 0 spends 2 -> 1, the
  // update at iteration 3 (stable 2) doubles 16 -> 32 and refills to 2, so the overflow at 4
  // only spends the budget again.
  const Fp16Config windowed = dynamic_config(4, 2, 2, false, 1.0);
  CHECK(run_script(windowed, {O, G, G, G, O}) == std::vector<double>{16, 16, 16, 32, 32});
  CHECK(hysteresis_after(windowed, {O, G, G, G, O}) == std::vector<std::int64_t>{1, 1, 1, 2, 1});
}

TEST_CASE("a halved scale below min_loss_scale is clamped to min_loss_scale", "[engine]") {
  // 8 -> 4 -> max(2, 3) = 3: the clamp can land on a value that is not a power of two.
  CHECK(run_script(dynamic_config(3, 1000, 1, false, 3.0), {O, O}) == std::vector<double>{4, 3});
  // An initial scale below the minimum: DeepSpeed's max() raises it on the first overflow.
  CHECK(run_script(dynamic_config(0, 1000, 1, false, 4.0), {O}) == std::vector<double>{4});
}

TEST_CASE("an overflow at min_loss_scale throws a config error and leaves the state", "[engine]") {
  LossScaler scaler = LossScaler::from_config(dynamic_config(3, 1000, 1, false, 3.0));
  scaler.update(O);  // 8 -> 4
  scaler.update(O);  // 4 -> 3, the minimum
  const LossScalerState before = scaler.state();
  REQUIRE(before.scale == 3.0);
  try {
    scaler.update(O);
    FAIL("an overflow at the minimum scale must throw");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::config);
    const std::string message = error.what();
    CHECK_THAT(message, Catch::Contains("fp16.min_loss_scale (3)"));
    CHECK_THAT(message, Catch::Contains("iteration 2"));
    CHECK_THAT(message, Catch::Contains("learning rate"));
  }
  CHECK(scaler.state() == before);

  // With hysteresis 2 the budget is spent first: the second overflow at the minimum throws.
  LossScaler delayed = LossScaler::from_config(dynamic_config(0, 1000, 2, false, 1.0));
  CHECK(delayed.update(O));
  CHECK(delayed.scale() == 1.0);
  CHECK_THROWS_AS(delayed.update(O), Error);
}

TEST_CASE("a static scaler never changes its scale but asks to skip every overflow", "[engine]") {
  Fp16Config fp16;
  fp16.enabled = true;
  fp16.loss_scale = 128.0;
  LossScaler fp16_static = LossScaler::from_config(fp16);
  LossScaler bf16 = LossScaler::fixed(1.0);
  CHECK_FALSE(fp16_static.dynamic());
  CHECK_FALSE(bf16.dynamic());

  std::mt19937_64 rng(7);
  const std::vector<bool> script = random_script(rng, 2000, 50);
  for (std::size_t k = 0; k < script.size(); ++k) {
    INFO("update " << k);
    REQUIRE(fp16_static.update(script[k]) == script[k]);
    REQUIRE(bf16.update(script[k]) == script[k]);
    REQUIRE(fp16_static.scale() == 128.0);
    REQUIRE(bf16.scale() == 1.0);
  }
  // Even overflows in a row never reach an error: there is no minimum to hit.
  for (int k = 0; k < 100; ++k) fp16_static.update(O);
  CHECK(fp16_static.scale() == 128.0);
  CHECK(fp16_static.state().iteration == 2100);
  CHECK(fp16_static.state().last_overflow_iteration == 2099);
}

TEST_CASE("the dynamic scaler matches DeepSpeed's update_scale on random scripts", "[engine]") {
  std::mt19937_64 rng(20240611);
  int combinations = 0;
  int reached_minimum = 0;
  for (const std::int64_t power : {0, 1, 3, 16}) {
    for (const std::int64_t window : {1, 2, 3, 5, 17}) {
      for (const std::int64_t hysteresis : {1, 2, 3, 4}) {
        for (const bool consecutive : {false, true}) {
          for (const double min_scale : {0.25, 1.0, 3.0, 1024.0}) {
            for (const unsigned percent : {2u, 10u, 30u, 60u}) {
              ++combinations;
              const Fp16Config fp16 =
                  dynamic_config(power, window, hysteresis, consecutive, min_scale);
              LossScaler scaler = LossScaler::from_config(fp16);
              DeepSpeedDynamicLossScaler reference = reference_for(fp16);
              const std::vector<bool> script = random_script(rng, 400, percent);
              for (std::size_t k = 0; k < script.size(); ++k) {
                bool reference_threw = false;
                try {
                  reference.update_scale(script[k]);
                } catch (const DeepSpeedDynamicLossScaler::MinimumReached&) {
                  reference_threw = true;
                }
                bool scaler_threw = false;
                bool skip = false;
                try {
                  skip = scaler.update(script[k]);
                } catch (const Error& error) {
                  scaler_threw = error.category() == ErrorCategory::config;
                }
                if (scaler_threw != reference_threw || (!scaler_threw && skip != script[k]) ||
                    !(scaler.state() == reference.state())) {
                  const LossScalerState got = scaler.state();
                  const LossScalerState want = reference.state();
                  FAIL("power " << power << " window " << window << " hysteresis " << hysteresis
                                << " consecutive " << consecutive << " min " << min_scale
                                << " percent " << percent << " update " << k << ": threw "
                                << scaler_threw << " (DeepSpeed " << reference_threw << "), scale "
                                << got.scale << " (" << want.scale << "), left "
                                << got.hysteresis_left << " (" << want.hysteresis_left
                                << "), iteration " << got.iteration << " (" << want.iteration
                                << "), last overflow " << got.last_overflow_iteration << " ("
                                << want.last_overflow_iteration << ")");
                }
                if (reference_threw) {
                  ++reached_minimum;
                  break;  // DeepSpeed exits the run here
                }
              }
            }
          }
        }
      }
    }
  }
  CHECK(combinations == 4 * 5 * 4 * 2 * 4 * 4);
  // Many scripts end at the minimum-scale error and many run to their end.
  CHECK(reached_minimum > combinations / 5);
  CHECK(combinations - reached_minimum > combinations / 5);
}

TEST_CASE("a scaler restored from a saved state continues exactly as the unbroken one",
          "[engine]") {
  for (const bool consecutive : {false, true}) {
    INFO("consecutive_hysteresis " << consecutive);
    const Fp16Config fp16 = dynamic_config(16, 4, 3, consecutive, 1.0);
    std::mt19937_64 rng(consecutive ? 11 : 12);
    const std::vector<bool> script = random_script(rng, 600, 15);
    LossScaler unbroken = LossScaler::from_config(fp16);
    // Save after at least 200 updates, at a point where the hysteresis budget is part spent.
    std::size_t k = 0;
    while (k < 200 || unbroken.state().hysteresis_left == 3) unbroken.update(script[k++]);
    const LossScalerState saved = unbroken.state();
    REQUIRE(k < 400);
    REQUIRE(saved.scale != 65536.0);

    LossScaler resumed = LossScaler::from_config(fp16);
    resumed.restore(saved);
    REQUIRE(resumed.state() == saved);
    for (; k < script.size(); ++k) {
      INFO("update " << k);
      REQUIRE(resumed.update(script[k]) == unbroken.update(script[k]));
      REQUIRE(resumed.state() == unbroken.state());
    }
  }
}

TEST_CASE("restore refuses a malformed state or one from other settings, changing nothing",
          "[engine]") {
  LossScaler scaler = LossScaler::from_config(dynamic_config(4, 10, 2, false, 1.0));
  scaler.update(O);
  const LossScalerState before = scaler.state();  // {16, 1, 1, 0}
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();

  const struct {
    LossScalerState state;
    ErrorCategory category;
    const char* names;
  } cases[] = {
      {{0.0, 1, 5, 2}, ErrorCategory::usage, "scale"},
      {{-8.0, 1, 5, 2}, ErrorCategory::usage, "scale"},
      {{inf, 1, 5, 2}, ErrorCategory::usage, "scale"},
      {{nan, 1, 5, 2}, ErrorCategory::usage, "scale"},
      {{8.0, 1, -1, -1}, ErrorCategory::usage, "iteration must be >= 0"},
      {{8.0, 1, 5, 5}, ErrorCategory::usage, "last_overflow_iteration"},
      {{8.0, 1, 5, -2}, ErrorCategory::usage, "last_overflow_iteration"},
      {{8.0, 0, 5, 2}, ErrorCategory::config, "fp16.hysteresis"},
      {{8.0, 3, 5, 2}, ErrorCategory::config, "fp16.hysteresis"},
  };
  for (const auto& c : cases) {
    INFO("expected a complaint about " << c.names);
    try {
      scaler.restore(c.state);
      FAIL("restore accepted a state it must refuse");
    } catch (const Error& error) {
      CHECK(error.category() == c.category);
      CHECK_THAT(std::string(error.what()), Catch::Contains(c.names));
    }
    CHECK(scaler.state() == before);
  }
  scaler.restore({8.0, 2, 5, -1});  // a fresh-looking state at another scale is fine
  CHECK(scaler.state() == LossScalerState{8.0, 2, 5, -1});

  LossScaler fixed = LossScaler::fixed(128.0);
  CHECK_THROWS_AS(fixed.restore({65536.0, 1, 3, -1}), Error);
  CHECK(fixed.scale() == 128.0);
  fixed.restore({128.0, 1, 3, 1});
  CHECK(fixed.state() == LossScalerState{128.0, 1, 3, 1});
}

TEST_CASE("from_config refuses out-of-range fp16 values, naming the key", "[engine]") {
  const auto refuses = [](Fp16Config fp16, const char* key) {
    INFO("key " << key);
    try {
      (void)LossScaler::from_config(fp16);
      FAIL("from_config accepted an out-of-range value");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::config);
      CHECK_THAT(std::string(error.what()), Catch::Contains(key));
    }
  };
  Fp16Config base;
  Fp16Config c = base;
  c.loss_scale = -1.0;
  refuses(c, "fp16.loss_scale");
  c = base;
  c.loss_scale = std::numeric_limits<double>::infinity();
  refuses(c, "fp16.loss_scale");
  c = base;
  c.initial_scale_power = -1;
  refuses(c, "fp16.initial_scale_power");
  c = base;
  c.initial_scale_power = 1024;
  refuses(c, "fp16.initial_scale_power");
  c = base;
  c.loss_scale_window = 0;
  refuses(c, "fp16.loss_scale_window");
  c = base;
  c.hysteresis = 0;
  refuses(c, "fp16.hysteresis");
  c = base;
  c.min_loss_scale = 0.0;
  refuses(c, "fp16.min_loss_scale");
  c = base;
  c.min_loss_scale = std::numeric_limits<double>::quiet_NaN();
  refuses(c, "fp16.min_loss_scale");
  // A static scale skips the dynamic keys: nonsense there does not matter.
  c = base;
  c.loss_scale = 4.0;
  c.hysteresis = 0;
  CHECK(LossScaler::from_config(c).scale() == 4.0);
}

TEST_CASE("fixed refuses a scale that is not positive and finite", "[engine]") {
  for (const double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()}) {
    INFO("scale " << bad);
    CHECK_THROWS_AS(LossScaler::fixed(bad), Error);
  }
  CHECK(LossScaler::fixed(0.5).scale() == 0.5);
}
