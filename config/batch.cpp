// The three batch keys, resolved from whichever are given and the world size exactly as
// DeepSpeed does (integer division), then checked: train_batch_size must equal
// micro_batch * accumulation * world size. "auto" counts as absent; an override supplies it.
#include <optional>

#include <fmt/format.h>

#include "config/sections.h"

namespace zero::config {
namespace {

constexpr const char* kTrain = "train_batch_size";
constexpr const char* kMicro = "train_micro_batch_size_per_gpu";
constexpr const char* kAccum = "gradient_accumulation_steps";

// A given, positive batch value; nullopt when absent, null or "auto" (error when invalid).
std::optional<std::int64_t> given(Section& root, const char* key, bool* invalid) {
  const json* value = root.raw(key);
  if (value == nullptr || value->is_null() || is_auto(*value)) return std::nullopt;
  const auto parsed = root.integer({key}, 0, kPositive);
  if (parsed <= 0) *invalid = true;
  return parsed;
}

// Why train_batch_size does not split when only it, or it and one other key, were given: the
// arithmetic, and the nearest sizes that would.
// `divisor_text` spells the divisor out ("the world size 4", "... 3 * world size 2 = 6").
std::string not_a_multiple(std::int64_t train, const std::string& divisor_text,
                           std::int64_t divisor, const char* derived) {
  const std::int64_t below = train / divisor * divisor, above = below + divisor;
  return fmt::format(
      "train_batch_size {} is not a multiple of {}, so {} would be {} / {} = {:.4g}, not a "
      "whole number; make train_batch_size a multiple of {} ({}{}), or give {} instead",
      train, divisor_text, derived, train, divisor, static_cast<double>(train) / divisor, divisor,
      below > 0 ? fmt::format("{} or ", below) : "", above, derived);
}

}  // namespace

void read_batch(Section& root, Config& config) {
  Reader& reader = root.reader();
  const std::int64_t world = config.world_size;
  bool invalid = false;
  auto train = given(root, kTrain, &invalid);
  auto micro = given(root, kMicro, &invalid);
  auto accum = given(root, kAccum, &invalid);
  if (invalid) return;
  const bool all_given = train && micro && accum;
  const bool train_micro = train && micro && !accum;
  const bool train_accum = train && accum && !micro;
  const bool train_only = train && !micro && !accum;

  const auto derive = [&](const char* key, std::int64_t value, std::string note) {
    if (const json* raw = root.raw(key); raw != nullptr && is_auto(*raw))
      note += " (from \"auto\")";
    reader.record(key, value, Source::derived, std::move(note));
    return value;
  };
  // Products checked for overflow: absurd sizes must fail, not wrap into valid-looking ones.
  const auto product = [&](std::int64_t a, std::int64_t b,
                           std::int64_t c) -> std::optional<std::int64_t> {
    std::int64_t ab = 0, abc = 0;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc))
      return std::nullopt;
    return abc;
  };
  const auto too_large = [&](std::int64_t m, std::int64_t a) {
    reader.error(fmt::format(
        "train_micro_batch_size_per_gpu * gradient_accumulation_steps * world size overflows: "
        "{} * {} * {}; use realistic batch sizes",
        m, a, world));
  };
  if (micro && accum && !product(*micro, *accum, world)) return too_large(*micro, *accum);
  if (micro && !accum && !product(*micro, 1, world)) return too_large(*micro, 1);
  if (train && micro && accum) {
    // All three given: only the check below.
  } else if (train && micro) {
    accum = derive(kAccum, *train / *micro / world,
                   fmt::format("= {} / {} / {} (world size)", *train, *micro, world));
  } else if (train && accum) {
    micro = derive(kMicro, *train / world / *accum,
                   fmt::format("= {} / {} (world size) / {}", *train, world, *accum));
  } else if (micro && accum) {
    train = derive(kTrain, *micro * *accum * world,
                   fmt::format("= {} * {} * {} (world size)", *micro, *accum, world));
  } else if (train) {
    accum = derive(kAccum, 1, "1 when only train_batch_size is given");
    micro = derive(kMicro, *train / world, fmt::format("= {} / {} (world size)", *train, world));
  } else if (micro) {
    accum = derive(kAccum, 1, "1 when only the micro batch is given");
    train = derive(kTrain, *micro * world, fmt::format("= {} * {} (world size)", *micro, world));
  } else {
    reader.error(fmt::format(
        "train_batch_size and train_micro_batch_size_per_gpu: neither is given (or both are "
        "\"auto\" with nothing to supply them); give at least one: {}",
        supply_hint(kMicro)));
    return;
  }

  if (*micro <= 0 || *accum <= 0) {
    reader.error(fmt::format(
        "{}: derived as {} from train_batch_size {} on world size {}; train_batch_size must be "
        "at least {} * {} * world size",
        *micro <= 0 ? kMicro : kAccum, *micro <= 0 ? *micro : *accum, *train, world, kMicro,
        kAccum));
    return;
  }
  if (*train != *micro * *accum * world) {
    if (all_given) {
      reader.error(fmt::format(
          "train_batch_size != train_micro_batch_size_per_gpu * gradient_accumulation_steps * "
          "world size: {} != {} * {} * {} = {}; give two of the three keys (the third is "
          "derived), or all three consistently",
          *train, *micro, *accum, world, *micro * *accum * world));
    } else if (train_micro) {
      reader.error(
          not_a_multiple(*train,
                         fmt::format("train_micro_batch_size_per_gpu {} * world size {} = {}",
                                     *micro, world, *micro * world),
                         *micro * world, kAccum));
    } else if (train_accum) {
      reader.error(not_a_multiple(*train,
                                  fmt::format("world size {} * gradient_accumulation_steps {} = {}",
                                              world, *accum, world * *accum),
                                  world * *accum, kMicro));
    } else if (train_only) {
      reader.error(not_a_multiple(*train, fmt::format("the world size {}", world), world, kMicro));
    }
    return;
  }
  config.batch = BatchConfig{*train, *micro, *accum};
}

}  // namespace zero::config
