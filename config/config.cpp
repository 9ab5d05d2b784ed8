// Reading a whole config: apply the caller's overrides, read each section in DeepSpeed's order
// (precision and ZeRO first, batch last), report unknown keys, and throw one config Error
// listing every problem when there are any.
#include "config/config.h"

#include <fmt/format.h>

#include "base/error.h"
#include "base/log.h"
#include "config/json_text.h"
#include "config/sections.h"

namespace zero::config {
namespace {

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    parts.emplace_back(path.substr(start, dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

// Writes each override into a copy of the document, creating objects along its path.
json apply_overrides(const json& document, const std::vector<Override>& overrides,
                     std::set<std::string>* overridden, std::set<std::string>* created,
                     std::vector<std::string>* errors) {
  json result = document;
  for (const Override& item : overrides) {
    const auto parts = split_path(item.path);
    bool well_formed = true;
    for (const auto& part : parts) well_formed = well_formed && !part.empty();
    if (!well_formed) {
      errors->push_back(
          fmt::format("override \"{}\": not a key path (write keys joined by dots, "
                      "like zero_optimization.stage)",
                      item.path));
      continue;
    }
    json* node = &result;
    bool ok = true;
    std::string prefix;
    for (std::size_t i = 0; i + 1 < parts.size() && ok; ++i) {
      prefix += (i ? "." : "") + parts[i];
      if (!node->contains(parts[i]) || (*node)[parts[i]].is_null()) {
        (*node)[parts[i]] = json::object();
        created->insert(prefix);
      }
      if (!(*node)[parts[i]].is_object()) {
        errors->push_back(fmt::format(
            "override {}: {} is {} in the config, not an object, so it has no key {}", item.path,
            fmt::join(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(i) + 1, "."),
            (*node)[parts[i]].dump(), parts[i + 1]));
        ok = false;
      }
      if (ok) node = &(*node)[parts[i]];
    }
    if (!ok) continue;
    (*node)[parts.back()] = item.value;
    overridden->insert(item.path);
  }
  return result;
}

}  // namespace

std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return "fp32";
    case Precision::fp16:
      return "fp16";
    case Precision::bf16:
      return "bf16";
  }
  return "?";
}

std::string_view offload_device_name(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::none:
      return "none";
    case OffloadDevice::cpu:
      return "cpu";
    case OffloadDevice::nvme:
      return "nvme";
  }
  return "?";
}

std::string_view optimizer_name(OptimizerType type) {
  return optim::optimizer_type_name(type);
}

std::string_view scheduler_name(SchedulerType type) {
  return optim::schedule_type_name(type);
}

DType Config::compute_dtype() const {
  switch (precision) {
    case Precision::fp16:
      return DType::f16;
    case Precision::bf16:
      return DType::bf16;
    case Precision::fp32:
      break;
  }
  return DType::f32;
}

Override parse_override(std::string_view assignment) {
  const auto equals = assignment.find('=');
  if (equals == std::string_view::npos || equals == 0) {
    throw make_error(ErrorCategory::usage,
                     "override \"{}\": expected KEY=VALUE, e.g. zero_optimization.stage=3",
                     assignment);
  }
  Override result{std::string(assignment.substr(0, equals)), json()};
  const std::string_view text = assignment.substr(equals + 1);
  try {
    result.value = json::parse(text);
  } catch (const json::parse_error&) {
    result.value = std::string(text);  // a bare word: a string value
  } catch (const json::exception& error) {
    throw make_error(ErrorCategory::usage, "override \"{}\": {}", assignment, error.what());
  }
  return result;
}

Config read_config(const json& document, const ReadOptions& options) {
  if (options.world_size < 1) {
    throw make_error(ErrorCategory::usage, "config: world size {} must be at least 1",
                     options.world_size);
  }
  if (!document.is_object()) {
    throw make_error(ErrorCategory::config, "{}: a config is a JSON object {{...}}, got {}",
                     options.source, describe(document));
  }
  std::set<std::string> overridden, created;
  std::vector<std::string> override_errors;
  const json effective =
      apply_overrides(document, options.overrides, &overridden, &created, &override_errors);

  Config config;
  config.world_size = options.world_size;
  config.ranks_per_node = options.ranks_per_node;
  Reader reader(effective, overridden, created);
  for (auto& message : override_errors) reader.error(std::move(message));
  Section root = reader.root();
  read_precision(root, config);
  read_zero_optimization(root, config);
  read_optimizer(root, config);
  read_scheduler(root, config);
  read_runtime_keys(root, config);
  declare_foreign_sections(root);
  read_batch(root, config);
  root.finish();
  reader.finish();

  if (!reader.errors().empty()) {
    std::string message;
    for (const auto& line : reader.errors()) {
      message += (message.empty() ? "" : "\n") + line;
    }
    throw Error(ErrorCategory::config, message);
  }
  config.resolved = reader.resolved();
  config.known = reader.known();
  config.infos = reader.infos();
  config.warnings = reader.warnings();
  return config;
}

Config read_config_text(std::string_view text, ReadOptions options) {
  return read_config(parse_json_text(text, options.source), options);
}

Config read_config_file(const std::string& path, ReadOptions options) {
  options.source = path;
  return read_config(read_json_file(path), options);
}

void log_notes(const Config& config) {
  for (const auto& line : config.infos) log::info("config: {}", line);
  for (const auto& line : config.warnings) log::warn("config: {}", line);
}

void settle_auto(Config& config, std::string_view key, json value, std::string note) {
  for (ResolvedValue& r : config.resolved) {
    if (r.path != key) continue;
    r.value = std::move(value);
    r.note = std::move(note);
    return;
  }
}

std::optional<json> resolved_value(const Config& config, std::string_view key) {
  if (key.empty()) return std::nullopt;
  std::optional<json> section;
  for (const ResolvedValue& value : config.resolved) {
    if (value.path == key) return value.value;
    if (value.path.size() <= key.size() || value.path.compare(0, key.size(), key) != 0 ||
        value.path[key.size()] != '.') {
      continue;
    }
    if (!section) section = json::object();
    // "a.b.c" under "a" goes to section["b"]["c"].
    json* node = &*section;
    std::string_view rest = std::string_view(value.path).substr(key.size() + 1);
    for (std::size_t dot; (dot = rest.find('.')) != std::string_view::npos;
         rest.remove_prefix(dot + 1)) {
      json& child = (*node)[std::string(rest.substr(0, dot))];
      if (!child.is_object()) child = json::object();
      node = &child;
    }
    (*node)[std::string(rest)] = value.value;
  }
  return section;
}

}  // namespace zero::config
