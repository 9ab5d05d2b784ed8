// zero-config: validate a DeepSpeed-style config and show how zero resolves it.
//
//   zero-config check FILE [--world-size N] [--set KEY=VALUE ...] [--json] [--quiet]
//   zero-config keys [--class CLASS]
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "base/error.h"
#include "config/config.h"
#include "tools/cli_checks.h"

namespace {

using zero::config::json;

int check(const std::string& path, int world_size, const std::vector<std::string>& sets,
          bool as_json, bool quiet) {
  zero::config::ReadOptions options;
  options.world_size = world_size;
  for (const auto& assignment : sets)
    options.overrides.push_back(zero::config::parse_override(assignment));
  const zero::config::Config config = zero::config::read_config_file(path, options);

  if (as_json) {
    json out = json::object();
    out["config"] = path;
    out["world_size"] = world_size;
    json values = json::array();
    for (const auto& value : config.resolved) {
      values.push_back({{"key", value.path},
                        {"value", value.value},
                        {"source", zero::config::source_name(value.source)},
                        {"note", value.note}});
    }
    out["resolved"] = values;
    out["infos"] = config.infos;
    out["warnings"] = config.warnings;
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (!quiet) {
    std::cout << fmt::format("{} (world size {}): valid\n\n", path, world_size);
    std::size_t width = 0;
    for (const auto& value : config.resolved) width = std::max(width, value.path.size());
    for (const auto& value : config.resolved) {
      std::cout << fmt::format("  {:<{}}  {:<22}  {:<8}  {}\n", value.path, width,
                               value.value.dump(), zero::config::source_name(value.source),
                               value.note);
    }
  }
  if (!config.infos.empty() || !config.warnings.empty()) std::cout << "\n";
  for (const auto& line : config.infos) std::cout << "info: " << line << "\n";
  for (const auto& line : config.warnings) std::cout << "warning: " << line << "\n";
  return 0;
}

// Every key zero knows: read a set of configs that between them open every section, optimizer
// type and scheduler type, and list the union of the keys each declared.
int keys(const std::string& only_class, bool markdown) {
  if (!only_class.empty()) {
    bool matches = false;
    for (auto c : {zero::config::KeyClass::implemented, zero::config::KeyClass::no_effect,
                   zero::config::KeyClass::unsupported, zero::config::KeyClass::deprecated}) {
      matches =
          matches || zero::config::key_class_name(c).find(only_class) != std::string_view::npos;
    }
    if (!matches) {
      throw zero::make_error(zero::ErrorCategory::usage,
                             "--class {}: no class of key holds that text; use implemented, "
                             "effect (no effect here), supported (not supported when enabled) "
                             "or deprecated",
                             only_class);
    }
  }
  std::vector<std::string> documents;
  for (const char* optimizer : {"Adam", "Adagrad", "Lion", "SGD"}) {
    for (const char* scheduler :
         {R"({"type":"WarmupLR"})", R"({"type":"WarmupDecayLR","params":{"total_num_steps":10}})",
          R"({"type":"WarmupCosineLR","params":{"total_num_steps":10}})",
          R"({"type":"OneCycle","params":{"cycle_min_lr":0,"cycle_max_lr":1}})",
          R"({"type":"LRRangeTest"})"}) {
      documents.push_back(
          fmt::format(R"({{"train_batch_size":1,"optimizer":{{"type":"{}"}},"scheduler":{},)"
                      R"("zero_optimization":{{"stage":3}}}})",
                      optimizer, scheduler));
    }
  }
  std::vector<zero::config::KnownKey> all;
  std::map<std::string, bool> seen;
  for (const auto& document : documents) {
    const auto config = zero::config::read_config_text(document, {});
    for (const auto& key : config.known) {
      if (seen.emplace(key.path, true).second) all.push_back(key);
    }
  }
  std::size_t width = 0;
  for (const auto& key : all) width = std::max(width, key.path.size());
  if (markdown) std::cout << "| key | class | note |\n|---|---|---|\n";
  for (const auto& key : all) {
    const std::string_view name = zero::config::key_class_name(key.key_class);
    if (!only_class.empty() && name.find(only_class) == std::string_view::npos) continue;
    if (markdown) {
      std::cout << fmt::format("| `{}` | {} | {} |\n", key.path, name, key.note);
    } else {
      std::cout << fmt::format("{:<{}}  {:<26}  {}\n", key.path, width, name, key.note);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "zero-config: validate a DeepSpeed-style JSON config and show how zero resolves it.\n"
      "Every key is implemented, accepted without effect (with a note), refused as not "
      "supported when enabled, or unknown (an error naming the nearest key)."};
  app.require_subcommand(1);

  auto* check_command =
      app.add_subcommand("check",
                         "Validate FILE; print every resolved value and where it came from (file, "
                         "override, default, derived). Exits 1 with every problem found.");
  std::string path;
  int world_size = 1;
  std::vector<std::string> sets;
  bool as_json = false, quiet = false;
  check_command->add_option("FILE", path, "the config (JSON; // and /* */ comments allowed)")
      ->required();
  check_command
      ->add_option("-w,--world-size", world_size, "data-parallel ranks, for batch-size resolution")
      ->check(zero::tools::at_least(1))
      ->capture_default_str();
  check_command->add_option("--set", sets,
                            "KEY=VALUE override (dotted key; VALUE as JSON, else a string); "
                            "fills \"auto\" values and replaces the file's");
  check_command->add_flag("--json", as_json, "print the resolution as JSON");
  check_command->add_flag("-q,--quiet", quiet, "print only notes and errors");

  auto* keys_command =
      app.add_subcommand("keys", "List every config key zero knows, with its class and note.");
  std::string only_class;
  bool markdown = false;
  keys_command->add_flag("--markdown", markdown,
                         "print a Markdown table (the list in docs/config.md)");
  keys_command->add_option("--class", only_class,
                           "only keys whose class contains this text (implemented, effect, "
                           "supported, deprecated)");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*check_command) return check(path, world_size, sets, as_json, quiet);
    return keys(only_class, markdown);
  } catch (const zero::Error& error) {
    const std::string message = error.what();
    std::size_t count = 1;
    for (char c : message) count += c == '\n';
    std::cerr << fmt::format("zero-config: {} ({}{}):\n", path.empty() ? "keys" : path,
                             zero::category_name(error.category()),
                             count > 1 ? fmt::format(", {} problems", count) : "");
    std::size_t start = 0;
    while (start <= message.size()) {
      const std::size_t end = message.find('\n', start);
      std::cerr << "  " << message.substr(start, end - start) << "\n";
      if (end == std::string::npos) break;
      start = end + 1;
    }
    return error.category() == zero::ErrorCategory::usage ? 2 : 1;
  }
}
