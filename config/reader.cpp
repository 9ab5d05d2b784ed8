// Section reads, provenance and unknown-key suggestions (see reader.h).
#include "config/reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include <fmt/format.h>

namespace zero::config {
namespace {

std::string join_path(const std::string& section, std::string_view key) {
  return section.empty() ? std::string(key) : section + "." + std::string(key);
}

std::string list_allowed(std::initializer_list<std::string_view> allowed) {
  std::string out;
  for (auto value : allowed) out += fmt::format("{}\"{}\"", out.empty() ? "" : ", ", value);
  return out;
}

// An integer from a JSON number written either way (5e8 is a float in JSON).
std::optional<std::int64_t> as_integer(const json& value) {
  if (value.is_number_unsigned()) {
    const auto x = value.get<std::uint64_t>();
    if (x > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<std::int64_t>(x);
  }
  if (value.is_number_integer()) return value.get<std::int64_t>();
  if (value.is_number_float()) {
    const double x = value.get<double>();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) <= 9.2e18) {
      return static_cast<std::int64_t>(x);
    }
  }
  return std::nullopt;
}

// pydantic's lax booleans: true/false, 0/1, and the strings "true"/"false".
std::optional<bool> as_boolean(const json& value) {
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number_integer()) {
    const auto x = value.get<std::int64_t>();
    if (x == 0 || x == 1) return x == 1;
  }
  if (value.is_string()) {
    const std::string text = fold_case(value.get<std::string>());
    if (text == "true") return true;
    if (text == "false") return false;
  }
  return std::nullopt;
}

std::string describe_range(IntRange range) {
  if (range.max == INT64_MAX) return fmt::format("an integer >= {}", range.min);
  return fmt::format("an integer from {} to {}", range.min, range.max);
}

std::string describe_range(RealRange range) {
  const char* low = range.min_exclusive ? ">" : ">=";
  if (std::isinf(range.max)) return fmt::format("a number {} {}", low, range.min);
  return fmt::format("a number {} {} and <= {}", low, range.min, range.max);
}

}  // namespace

std::string_view source_name(Source source) {
  switch (source) {
    case Source::file:
      return "file";
    case Source::override_value:
      return "override";
    case Source::default_value:
      return "default";
    case Source::derived:
      return "derived";
  }
  return "?";
}

std::string_view key_class_name(KeyClass key_class) {
  switch (key_class) {
    case KeyClass::implemented:
      return "implemented";
    case KeyClass::no_effect:
      return "no effect here";
    case KeyClass::unsupported:
      return "not supported when enabled";
    case KeyClass::deprecated:
      return "deprecated";
  }
  return "?";
}

std::string fold_case(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool is_auto(const json& value) {
  return value.is_string() && value.get<std::string>() == "auto";
}

std::string describe(const json& value) {
  return value.dump();
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: insertions, deletions, substitutions, adjacent transpositions.
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string supply_hint(std::string_view path) {
  std::string flag;
  if (path == "train_micro_batch_size_per_gpu") flag = "zero-train --micro-batch, ";
  if (path == "optimizer.params.lr") flag = "zero-train --lr, ";
  if (path == "scheduler.params.total_num_steps") flag = "zero-train --steps, ";
  return fmt::format("supply it with {}--set {}=VALUE, or a C API override of \"{}\"", flag, path,
                     path);
}

// ----------------------------------------------------------------------------------- Reader

Reader::Reader(const json& root, std::set<std::string> overridden,
               std::set<std::string> created_by_override)
    : root_(root), overridden_(std::move(overridden)), created_(std::move(created_by_override)) {}

Section Reader::root() {
  return Section(*this, "", &root_);
}

void Reader::record(std::string path, json value, Source source, std::string note) {
  for (auto& entry : resolved_) {
    if (entry.path == path) {  // a later resolution (derived) replaces an earlier one
      entry = ResolvedValue{std::move(path), std::move(value), source, std::move(note)};
      return;
    }
  }
  resolved_.push_back(ResolvedValue{std::move(path), std::move(value), source, std::move(note)});
}

void Reader::declare(std::string path, KeyClass key_class, std::string note) {
  const auto dot = path.rfind('.');
  const std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
  const std::string key = dot == std::string::npos ? path : path.substr(dot + 1);
  if (!known_by_section_[section].insert(key).second) return;
  known_.push_back(KnownKey{std::move(path), key_class, std::move(note)});
}

void Reader::unknown(std::string section_path, std::string key) {
  unknown_.emplace_back(std::move(section_path), std::move(key));
}

void Reader::not_supported(const std::string& path, std::string_view what, const json& value) {
  error(fmt::format("{}: {} is not supported by zero (got {}); remove it or disable it", path, what,
                    describe(value)));
}

namespace {

// The sections DeepSpeed validates strictly (pydantic models that forbid extra fields, or
// keyword arguments of the optimizer and scheduler): an unknown key there is an error. Anywhere
// else DeepSpeed reads the keys it knows and ignores the rest, so zero warns.
bool strict_section(const std::string& section) {
  static const std::set<std::string> kStrict{"zero_optimization",
                                             "zero_optimization.offload_optimizer",
                                             "zero_optimization.offload_param",
                                             "fp16",
                                             "bf16",
                                             "bfloat16",
                                             "optimizer.params",
                                             "scheduler.params"};
  return kStrict.count(section) > 0;
}

}  // namespace

void Reader::finish() {
  for (const auto& [section, key] : unknown_) {
    const std::string path = join_path(section, key);
    const bool strict = strict_section(section);
    // Strict: an error. Elsewhere: a warning, as DeepSpeed ignores such keys.
    auto report = [&](const std::string& what) {
      if (strict) {
        error(fmt::format("{}: {}", path, what));
      } else {
        warning(fmt::format("{}: {}; ignored, as DeepSpeed ignores it", path, what));
      }
    };
    // Nearest key in the same section, by edit distance on lower case.
    std::string best;
    std::size_t best_distance = SIZE_MAX;
    for (const auto& candidate : known_by_section_[section]) {
      const std::size_t distance = edit_distance(fold_case(key), fold_case(candidate));
      if (distance < best_distance) {
        best_distance = distance;
        best = candidate;
      }
    }
    const std::size_t limit = std::max<std::size_t>(2, key.size() / 3);
    if (!best.empty() && best_distance <= limit) {
      report(fmt::format("unknown key; did you mean {}?", best));
      continue;
    }
    // The same key where it belongs in another section (e.g. a zero_optimization key at the top).
    std::string elsewhere;
    for (const auto& known : known_) {
      const auto dot = known.path.rfind('.');
      const std::string_view last = dot == std::string::npos
                                        ? std::string_view(known.path)
                                        : std::string_view(known.path).substr(dot + 1);
      if (last == key && known.path != path) {
        elsewhere = known.path;
        break;
      }
    }
    if (!elsewhere.empty()) {
      report(fmt::format("unknown key here; did you mean {}?", elsewhere));
    } else {
      report("unknown key (`zero-config keys` lists every key zero knows)");
    }
  }
  unknown_.clear();
}

// ---------------------------------------------------------------------------------- Section

Section::Section(Reader& reader, std::string path, const json* object)
    : reader_(reader), path_(std::move(path)), object_(object) {}

std::string Section::key_path(std::string_view key) const {
  return join_path(path_, key);
}

bool Section::has(std::string_view key) const {
  return object_ != nullptr && object_->contains(std::string(key));
}

const json* Section::peek(std::string_view key) const {
  return has(key) ? &object_->at(std::string(key)) : nullptr;
}

Source Section::source_of(std::string_view key) const {
  return reader_.is_overridden(key_path(key)) ? Source::override_value : Source::file;
}

std::optional<std::string_view> Section::find(std::initializer_list<std::string_view> names) {
  std::optional<std::string_view> found;
  for (auto name : names) {
    read_.emplace(name);
    reader_.declare(key_path(name), KeyClass::implemented,
                    name == *names.begin() ? "" : fmt::format("alias of {}", *names.begin()));
    if (!has(name)) continue;
    if (found) {
      // An override by one spelling replaces the file's value under the other.
      if (reader_.is_overridden(key_path(name))) {
        found = name;
        continue;
      }
      if (reader_.is_overridden(key_path(*found))) continue;
      reader_.error(fmt::format("{}: given together with its alias {}; keep one", key_path(*found),
                                key_path(name)));
      continue;
    }
    found = name;
  }
  return found;
}

const json* Section::raw(std::string_view key) {
  read_.emplace(key);
  reader_.declare(key_path(key), KeyClass::implemented);
  return has(key) ? &object_->at(std::string(key)) : nullptr;
}

void Section::declare(std::string_view name, KeyClass key_class, std::string_view note) {
  read_.emplace(name);
  reader_.declare(key_path(name), key_class, std::string(note));
}

const json* Section::given(std::initializer_list<std::string_view> names, const json& fallback,
                           std::string_view* name) {
  const auto found = find(names);
  const json* value = found ? &object_->at(std::string(*found)) : nullptr;
  if (value == nullptr || value->is_null() || is_auto(*value)) {
    reader_.record(key_path(*names.begin()), fallback, Source::default_value,
                   value != nullptr && is_auto(*value) ? "from \"auto\"" : "");
    if (value != nullptr && is_auto(*value)) {
      reader_.info(
          fmt::format("{}: \"auto\", and nothing supplies it: the default {} (give a "
                      "value, or an override)",
                      key_path(*names.begin()), describe(fallback)));
    }
    return nullptr;
  }
  *name = *found;
  return value;
}

bool Section::boolean(std::initializer_list<std::string_view> names, bool fallback) {
  const std::string recorded = key_path(*names.begin());
  std::string_view name;
  const json* given_value = given(names, fallback, &name);
  if (given_value == nullptr) return fallback;
  const json& value = *given_value;
  if (const auto parsed = as_boolean(value)) {
    reader_.record(recorded, *parsed, source_of(name));
    return *parsed;
  }
  reader_.error(fmt::format("{}: expected true or false, got {}", key_path(name), describe(value)));
  return fallback;
}

std::int64_t Section::integer(std::initializer_list<std::string_view> names, std::int64_t fallback,
                              IntRange range) {
  const std::string recorded = key_path(*names.begin());
  std::string_view name;
  const json* given_value = given(names, fallback, &name);
  if (given_value == nullptr) return fallback;
  const json& value = *given_value;
  const auto parsed = as_integer(value);
  if (!parsed || *parsed < range.min || *parsed > range.max) {
    reader_.error(fmt::format("{}: expected {}, got {}", key_path(name), describe_range(range),
                              describe(value)));
    return fallback;
  }
  reader_.record(recorded, *parsed, source_of(name));
  return *parsed;
}

double Section::real(std::initializer_list<std::string_view> names, double fallback,
                     RealRange range) {
  const std::string recorded = key_path(*names.begin());
  std::string_view name;
  const json* given_value = given(names, fallback, &name);
  if (given_value == nullptr) return fallback;
  const json& value = *given_value;
  const bool numeric = value.is_number();
  const double x = numeric ? value.get<double>() : 0.0;
  const bool below = range.min_exclusive ? x <= range.min : x < range.min;
  if (!numeric || !std::isfinite(x) || below || x > range.max) {
    reader_.error(fmt::format("{}: expected {}, got {}", key_path(name), describe_range(range),
                              describe(value)));
    return fallback;
  }
  reader_.record(recorded, x, source_of(name));
  return x;
}

std::string Section::choice(std::initializer_list<std::string_view> names, std::string fallback,
                            std::initializer_list<std::string_view> allowed, bool ignore_case) {
  const std::string recorded = key_path(*names.begin());
  std::string_view name;
  const json* given_value = given(names, fallback, &name);
  if (given_value == nullptr) return fallback;
  const json& value = *given_value;
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    for (auto candidate : allowed) {
      if (candidate == text || (ignore_case && fold_case(candidate) == fold_case(text))) {
        reader_.record(recorded, std::string(candidate), source_of(name));
        return std::string(candidate);
      }
    }
  }
  reader_.error(fmt::format("{}: expected one of {}, got {}", key_path(name), list_allowed(allowed),
                            describe(value)));
  return fallback;
}

std::string Section::text(std::initializer_list<std::string_view> names, std::string fallback) {
  const std::string recorded = key_path(*names.begin());
  std::string_view name;
  const json* given_value = given(names, fallback, &name);
  if (given_value == nullptr) return fallback;
  const json& value = *given_value;
  if (!value.is_string()) {
    reader_.error(fmt::format("{}: expected a string, got {}", key_path(name), describe(value)));
    return fallback;
  }
  reader_.record(recorded, value, source_of(name));
  return value.get<std::string>();
}

std::optional<std::int64_t> Section::required_integer(std::string_view name, IntRange range) {
  const json* value = raw(name);
  if (value == nullptr || is_auto(*value)) {
    reader_.error(fmt::format("{}: {}; {}", key_path(name),
                              value == nullptr ? "required" : "is \"auto\" and nothing supplies it",
                              supply_hint(key_path(name))));
    return std::nullopt;
  }
  const auto parsed = as_integer(*value);
  if (!parsed || *parsed < range.min || *parsed > range.max) {
    reader_.error(fmt::format("{}: expected {}, got {}", key_path(name), describe_range(range),
                              describe(*value)));
    return std::nullopt;
  }
  reader_.record(key_path(name), *parsed, source_of(name));
  return parsed;
}

std::optional<double> Section::required_real(std::string_view name, RealRange range) {
  const json* value = raw(name);
  if (value == nullptr || is_auto(*value)) {
    reader_.error(fmt::format("{}: {}; {}", key_path(name),
                              value == nullptr ? "required" : "is \"auto\" and nothing supplies it",
                              supply_hint(key_path(name))));
    return std::nullopt;
  }
  const double x = value->is_number() ? value->get<double>() : 0.0;
  const bool below = range.min_exclusive ? x <= range.min : x < range.min;
  if (!value->is_number() || !std::isfinite(x) || below || x > range.max) {
    reader_.error(fmt::format("{}: expected {}, got {}", key_path(name), describe_range(range),
                              describe(*value)));
    return std::nullopt;
  }
  reader_.record(key_path(name), x, source_of(name));
  return x;
}

Section Section::child(std::string_view name, KeyClass key_class) {
  read_.emplace(name);
  reader_.declare(key_path(name), key_class);
  if (!has(name)) return Section(reader_, key_path(name), nullptr);
  const json& value = object_->at(std::string(name));
  if (value.is_null()) return Section(reader_, key_path(name), nullptr);
  if (!value.is_object()) {
    reader_.error(
        fmt::format("{}: expected an object {{...}}, got {}", key_path(name), describe(value)));
    return Section(reader_, key_path(name), nullptr);
  }
  return Section(reader_, key_path(name), &value);
}

void Section::no_effect(std::string_view name, std::string_view why) {
  declare(name, KeyClass::no_effect, why);
  if (has(name)) {
    reader_.info(fmt::format("{}: accepted, no effect here: {}", key_path(name), why));
  }
}

void Section::no_effect_flag(std::string_view name, std::string_view why) {
  declare(name, KeyClass::no_effect, why);
  if (!has(name)) return;
  const json& value = object_->at(std::string(name));
  if (!value.is_null() && !is_auto(value) && !as_boolean(value)) {
    reader_.error(
        fmt::format("{}: expected true or false, got {}", key_path(name), describe(value)));
    return;
  }
  reader_.info(fmt::format("{}: accepted, no effect here: {}", key_path(name), why));
}

void Section::unsupported_flag(std::string_view name, std::string_view what) {
  declare(name, KeyClass::unsupported, what);
  if (!has(name)) return;
  const json& value = object_->at(std::string(name));
  if (value.is_null() || is_auto(value)) return;
  const auto on = as_boolean(value);
  if (!on) {
    reader_.error(
        fmt::format("{}: expected true or false, got {}", key_path(name), describe(value)));
  } else if (*on) {
    reader_.error(fmt::format("{}: {} is not supported by zero (got {}); remove it or disable it",
                              key_path(name), what, describe(value)));
  } else {
    reader_.info(fmt::format("{}: accepted because it is disabled ({} is not supported)",
                             key_path(name), what));
  }
}

void Section::unsupported_section(std::string_view name, std::string_view what) {
  declare(name, KeyClass::unsupported, what);
  if (!has(name)) return;
  const json& value = object_->at(std::string(name));
  if (value.is_null()) return;
  if (!value.is_object()) {
    reader_.error(fmt::format("{}: expected an object {{\"enabled\": ...}}, got {}", key_path(name),
                              describe(value)));
    return;
  }
  const json* enabled = value.contains("enabled") ? &value.at("enabled") : nullptr;
  std::optional<bool> on = false;
  if (enabled != nullptr && !enabled->is_null() && !is_auto(*enabled)) on = as_boolean(*enabled);
  if (!on) {
    reader_.error(fmt::format("{}.enabled: expected true or false, got {}", key_path(name),
                              describe(*enabled)));
  } else if (*on) {
    reader_.error(fmt::format("{}: {} is not supported by zero (got {}); remove it or disable it",
                              key_path(name), what, describe(value)));
  } else {
    reader_.info(fmt::format("{}: accepted because it is disabled ({} is not supported)",
                             key_path(name), what));
  }
}

void Section::unsupported_if(std::string_view name, bool (*enabled_when)(const json&),
                             std::string_view what, std::string_view instead) {
  declare(name, KeyClass::unsupported, what);
  if (!has(name)) return;
  const json& value = object_->at(std::string(name));
  if (value.is_null() || is_auto(value)) return;
  if (enabled_when(value)) {
    reader_.error(fmt::format("{}: {} is not supported by zero (got {}); remove it or disable it{}",
                              key_path(name), what, describe(value),
                              instead.empty() ? "" : fmt::format(" ({})", instead)));
  } else {
    reader_.info(fmt::format("{}: accepted because it is disabled ({} is not supported)",
                             key_path(name), what));
  }
}

void Section::finish() {
  if (object_ == nullptr) return;
  for (const auto& [key, value] : object_->items()) {
    if (read_.find(key) == read_.end()) reader_.unknown(path_, key);
  }
}

}  // namespace zero::config
