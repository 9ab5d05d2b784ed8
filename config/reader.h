// The machinery every config section is read with. A Section reads typed values from one JSON
// object; each read registers the key as known (with its class), records the resolved value
// and where it came from, and collects errors instead of stopping at the first, so a user sees
// every problem of a config at once. Keys left unread are reported, at the end, as unknown
// with the nearest known key suggested.
//
// "auto" (Hugging Face's placeholder) counts as absent: the value comes from an override when
// the caller supplied one, else from the default; a key with no default names the override
// that would supply it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace zero::config {

using json = nlohmann::ordered_json;

// Where a resolved value came from.
enum class Source { file, override_value, default_value, derived };
std::string_view source_name(Source source);

// The four classes of keys (README: "Config keys").
enum class KeyClass {
  implemented,  // read and honoured
  no_effect,    // accepted; an info line says why it changes nothing here
  unsupported,  // changes training, not implemented: refused when enabled
  deprecated,   // an old spelling, mapped to its replacement with a warning
};
std::string_view key_class_name(KeyClass key_class);

struct ResolvedValue {
  std::string path;
  json value;
  Source source;
  std::string note;  // e.g. "from \"auto\"", "= 64 / (4 * 2)"
};

struct KnownKey {
  std::string path;
  KeyClass key_class;
  std::string note;  // why it has no effect, what it maps to, what is not supported
};

// Hints for "auto" keys that nothing resolved: which flag or override supplies each.
std::string supply_hint(std::string_view path);

class Section;

class Reader {
 public:
  // `overridden` holds the dotted paths whose values came from the caller's overrides.
  Reader(const json& root, std::set<std::string> overridden,
         std::set<std::string> created_by_override = {});

  Section root();

  void error(std::string message) { errors_.push_back(std::move(message)); }
  void warning(std::string message) { warnings_.push_back(std::move(message)); }
  void info(std::string message) { infos_.push_back(std::move(message)); }
  void record(std::string path, json value, Source source, std::string note = {});
  void declare(std::string path, KeyClass key_class, std::string note = {});
  void unknown(std::string section_path, std::string key);
  // The error for a feature that changes training and that zero does not implement.
  void not_supported(const std::string& path, std::string_view what, const json& value);
  bool is_overridden(const std::string& path) const { return overridden_.count(path) > 0; }
  // True when the object at `path` exists only because an override created it.
  bool created_by_override(const std::string& path) const { return created_.count(path) > 0; }

  // Reports the unknown keys, with suggestions: errors in the sections DeepSpeed validates
  // strictly (zero_optimization and its offload sections, fp16, bf16, optimizer.params,
  // scheduler.params), warnings elsewhere (DeepSpeed ignores them). Call once, after every
  // section.
  void finish();

  const std::vector<std::string>& errors() const { return errors_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::vector<std::string>& infos() const { return infos_; }
  const std::vector<ResolvedValue>& resolved() const { return resolved_; }
  const std::vector<KnownKey>& known() const { return known_; }

 private:
  const json& root_;
  std::set<std::string> overridden_;
  std::set<std::string> created_;
  std::vector<std::string> errors_;
  std::vector<std::string> warnings_;
  std::vector<std::string> infos_;
  std::vector<ResolvedValue> resolved_;
  std::vector<KnownKey> known_;
  std::map<std::string, std::set<std::string>> known_by_section_;
  std::vector<std::pair<std::string, std::string>> unknown_;  // (section path, key)
};

// Numeric bounds, inclusive.
struct IntRange {
  std::int64_t min;
  std::int64_t max;
};
struct RealRange {
  double min;
  double max;
  bool min_exclusive = false;
};
inline constexpr IntRange kNonNegative{0, INT64_MAX};
inline constexpr IntRange kPositive{1, INT64_MAX};

class Section {
 public:
  // `object` may be null (the section is absent): every read then gives its default.
  Section(Reader& reader, std::string path, const json* object);

  const std::string& path() const { return path_; }
  bool present() const { return object_ != nullptr; }
  bool has(std::string_view key) const;
  // The raw value of a key without marking it known (nullptr when absent).
  const json* peek(std::string_view key) const;
  // The raw value of a key (nullptr when absent), marking the key as known and implemented.
  const json* raw(std::string_view key);
  std::string key_path(std::string_view key) const;

  // Typed reads. `names` lists the key and its aliases (DeepSpeed accepts both spellings of
  // the stage-3 keys); giving two of them is an error. The first name is the one recorded.
  bool boolean(std::initializer_list<std::string_view> names, bool fallback);
  std::int64_t integer(std::initializer_list<std::string_view> names, std::int64_t fallback,
                       IntRange range = kNonNegative);
  double real(std::initializer_list<std::string_view> names, double fallback, RealRange range);
  std::string choice(std::initializer_list<std::string_view> names, std::string fallback,
                     std::initializer_list<std::string_view> allowed, bool ignore_case = false);
  std::string text(std::initializer_list<std::string_view> names, std::string fallback);
  // A key without a default: absent or "auto" is an error naming what would supply it.
  std::optional<std::int64_t> required_integer(std::string_view name, IntRange range);
  std::optional<double> required_real(std::string_view name, RealRange range);

  // A nested object; absent gives an absent Section. A non-object value is an error.
  Section child(std::string_view name, KeyClass key_class = KeyClass::implemented);

  // Declares a key accepted without effect: when present, an info line gives `why`.
  void no_effect(std::string_view name, std::string_view why);
  // The same for a boolean key: a value that is not a boolean is still an error.
  void no_effect_flag(std::string_view name, std::string_view why);
  // Declares a switch that changes training and that we do not implement: `enabled_when`
  // decides from the value whether it is on; on is an error saying `what` is not supported.
  // null and "auto" count as off (DeepSpeed drops "auto" and takes the default, off).
  // `instead`, when given, names what to use instead.
  void unsupported_if(std::string_view name, bool (*enabled_when)(const json&),
                      std::string_view what, std::string_view instead = {});
  // A boolean switch: true is refused; a value that is not a boolean is a type error.
  void unsupported_flag(std::string_view name, std::string_view what);
  // A section switched by its "enabled" key: enabled is refused; the section must be an
  // object and "enabled" a boolean.
  void unsupported_section(std::string_view name, std::string_view what);
  // Marks a key as handled by the caller (read through raw()).
  void declare(std::string_view name, KeyClass key_class, std::string_view note = {});

  // Queues every key of this object that no read or declaration named.
  void finish();

  Reader& reader() { return reader_; }

 private:
  // Finds which of `names` is present (error when several); marks all as known.
  std::optional<std::string_view> find(std::initializer_list<std::string_view> names);
  Source source_of(std::string_view key) const;
  // The value of the first present spelling in `names`, or nullptr after recording `fallback`
  // as the default when the key is absent, null or "auto".
  const json* given(std::initializer_list<std::string_view> names, const json& fallback,
                    std::string_view* name);

  Reader& reader_;
  std::string path_;
  const json* object_;
  std::set<std::string, std::less<>> read_;
};

bool is_auto(const json& value);
std::string fold_case(std::string_view text);  // lower case, for case-insensitive names
std::string describe(const json& value);       // a value as it appears in messages
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace zero::config
