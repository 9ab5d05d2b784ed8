#include "engine/plan/registry.h"

#include <bit>
#include <cmath>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <xxhash.h>

#include "base/error.h"

namespace zero::engine {

namespace {

// The canonical byte encoding the hashes are taken over: fixed-width little-endian integers,
// strings as their length then their bytes, doubles as their bit patterns. Each entry starts
// with a kind tag so that a group and a module of the same name do not hash alike.
class Encoder {
 public:
  void u8(std::uint8_t v) { bytes_.push_back(static_cast<char>(v)); }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) u8(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
  void f64(double v) { u64(std::bit_cast<std::uint64_t>(v)); }
  void str(std::string_view s) {
    u64(s.size());
    bytes_.append(s);
  }
  std::uint64_t hash() const { return XXH3_64bits(bytes_.data(), bytes_.size()); }

 private:
  std::string bytes_;
};

enum RecordTag : std::uint8_t {
  kGroupRecord = 'G',
  kModuleRecord = 'M',
  kParamRecord = 'P',
  kWholeRecord = 'R'
};

bool finite_non_negative(double v) {
  return std::isfinite(v) && v >= 0.0;
}

}  // namespace

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

Registry::Registry(double default_weight_decay) {
  if (!finite_non_negative(default_weight_decay)) {
    throw make_error(ErrorCategory::usage,
                     "registry: the default group's weight_decay {} must "
                     "be finite and >= 0",
                     default_weight_decay);
  }
  groups_.push_back(GroupSpec{"default", default_weight_decay, 1.0});
  group_index_.emplace("default", 0);
}

void Registry::check_open(std::string_view call, std::string_view name) const {
  if (frozen_) {
    throw make_error(ErrorCategory::usage,
                     "{} '{}': registration is closed after init; "
                     "register every group, module and parameter before the engine's init",
                     call, name);
  }
  if (name.empty()) {
    throw make_error(ErrorCategory::usage,
                     "{}: the name is empty; every entry needs a unique, "
                     "non-empty name",
                     call);
  }
}

std::size_t Registry::add_group(std::string name, double weight_decay, double lr_scale) {
  check_open("add_group", name);
  if (const auto it = group_index_.find(name); it != group_index_.end()) {
    throw make_error(ErrorCategory::usage,
                     "add_group '{}': a group of that name is already "
                     "registered (group {}); group names must be unique",
                     name, it->second);
  }
  if (!finite_non_negative(weight_decay)) {
    throw make_error(ErrorCategory::usage,
                     "add_group '{}': weight_decay {} must be finite and "
                     ">= 0",
                     name, weight_decay);
  }
  if (!finite_non_negative(lr_scale)) {
    throw make_error(ErrorCategory::usage,
                     "add_group '{}': lr_scale {} must be finite and "
                     ">= 0",
                     name, lr_scale);
  }
  const std::size_t index = groups_.size();
  group_index_.emplace(name, index);
  groups_.push_back(GroupSpec{std::move(name), weight_decay, lr_scale});
  return index;
}

std::size_t Registry::add_module(std::string name) {
  check_open("add_module", name);
  if (const auto it = module_index_.find(name); it != module_index_.end()) {
    throw make_error(ErrorCategory::usage,
                     "add_module '{}': a module of that name is already "
                     "registered (module {}); module names must be unique",
                     name, it->second);
  }
  const std::size_t index = modules_.size();
  module_index_.emplace(name, index);
  modules_.push_back(ModuleSpec{std::move(name), {}});
  return index;
}

std::size_t Registry::add_param(std::string name, std::vector<std::int64_t> shape, bool trainable,
                                std::size_t group, std::vector<std::size_t> modules) {
  check_open("add_param", name);
  if (const auto it = param_index_.find(name); it != param_index_.end()) {
    throw make_error(ErrorCategory::usage,
                     "add_param '{}': a parameter of that name is already "
                     "registered (parameter {}); parameter names must be unique",
                     name, it->second);
  }

  // numel: every dim checked first, so that a 0 dim does not hide a negative one.
  bool has_zero = false;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      throw make_error(ErrorCategory::usage,
                       "add_param '{}': dimension {} of shape {} is "
                       "negative; dimensions must be >= 0",
                       name, d, shape_text(shape));
    }
    has_zero = has_zero || shape[d] == 0;
  }
  std::size_t numel = 1;
  if (has_zero) {
    numel = 0;
  } else {
    for (const std::int64_t dim : shape) {
      const auto n = static_cast<std::size_t>(dim);
      if (n > kMaxNumel / numel) {
        throw make_error(ErrorCategory::usage,
                         "add_param '{}': shape {} has more than 2^62 "
                         "elements",
                         name, shape_text(shape));
      }
      numel *= n;
    }
  }
  if (numel > kMaxNumel - total_numel_) {
    throw make_error(ErrorCategory::usage,
                     "add_param '{}': its {} elements would bring the "
                     "registered parameters past 2^62 elements ({} registered so far)",
                     name, numel, total_numel_);
  }

  if (group >= groups_.size()) {
    throw make_error(ErrorCategory::usage,
                     "add_param '{}': group index {} does not exist ({} "
                     "groups registered)",
                     name, group, groups_.size());
  }
  if (modules.empty()) {
    throw make_error(ErrorCategory::usage,
                     "add_param '{}': the list of modules that use it is "
                     "empty; give at least one module index (from add_module)",
                     name);
  }
  std::unordered_set<std::size_t> seen;
  for (const std::size_t m : modules) {
    if (m >= modules_.size()) {
      throw make_error(ErrorCategory::usage,
                       "add_param '{}': module index {} does not exist "
                       "({} modules registered)",
                       name, m, modules_.size());
    }
    if (!seen.insert(m).second) {
      throw make_error(ErrorCategory::usage,
                       "add_param '{}': module {} '{}' is listed twice; "
                       "list each module that uses the parameter once",
                       name, m, modules_[m].name);
    }
  }

  const std::size_t index = params_.size();
  for (const std::size_t m : modules) modules_[m].params.push_back(index);
  param_index_.emplace(name, index);
  total_numel_ += numel;
  if (trainable) trainable_numel_ += numel;
  params_.push_back(
      ParamSpec{std::move(name), std::move(shape), numel, trainable, group, std::move(modules)});
  return index;
}

namespace {

template <typename Index>
std::optional<std::size_t> lookup(const Index& index, std::string_view name) {
  const auto it = index.find(name);
  if (it == index.end()) return std::nullopt;
  return it->second;
}

}  // namespace

std::optional<std::size_t> Registry::find_group(std::string_view name) const {
  return lookup(group_index_, name);
}
std::optional<std::size_t> Registry::find_module(std::string_view name) const {
  return lookup(module_index_, name);
}
std::optional<std::size_t> Registry::find_param(std::string_view name) const {
  return lookup(param_index_, name);
}

const GroupSpec& Registry::group(std::size_t index) const {
  if (index >= groups_.size()) {
    throw make_error(ErrorCategory::usage,
                     "group index {} does not exist ({} groups "
                     "registered)",
                     index, groups_.size());
  }
  return groups_[index];
}

const ModuleSpec& Registry::module(std::size_t index) const {
  if (index >= modules_.size()) {
    throw make_error(ErrorCategory::usage,
                     "module index {} does not exist ({} modules "
                     "registered)",
                     index, modules_.size());
  }
  return modules_[index];
}

const ParamSpec& Registry::param(std::size_t index) const {
  if (index >= params_.size()) {
    throw make_error(ErrorCategory::usage,
                     "parameter index {} does not exist ({} parameters "
                     "registered)",
                     index, params_.size());
  }
  return params_[index];
}

std::size_t Registry::entry_count() const noexcept {
  return groups_.size() + modules_.size() + params_.size();
}

std::vector<std::uint64_t> Registry::entry_hashes() const {
  std::vector<std::uint64_t> hashes;
  hashes.reserve(entry_count());
  for (const GroupSpec& g : groups_) {
    Encoder e;
    e.u8(kGroupRecord);
    e.str(g.name);
    e.f64(g.weight_decay);
    e.f64(g.lr_scale);
    hashes.push_back(e.hash());
  }
  for (const ModuleSpec& m : modules_) {
    Encoder e;
    e.u8(kModuleRecord);
    e.str(m.name);
    hashes.push_back(e.hash());
  }
  for (const ParamSpec& p : params_) {
    Encoder e;
    e.u8(kParamRecord);
    e.str(p.name);
    e.u64(p.shape.size());
    for (const std::int64_t dim : p.shape) e.i64(dim);
    e.u8(p.trainable ? 1 : 0);
    e.u64(p.group);
    e.u64(p.modules.size());
    for (const std::size_t m : p.modules) e.u64(m);
    hashes.push_back(e.hash());
  }
  return hashes;
}

std::uint64_t Registry::hash() const {
  Encoder e;
  e.u8(kWholeRecord);
  e.u64(groups_.size());
  e.u64(modules_.size());
  e.u64(params_.size());
  for (const std::uint64_t h : entry_hashes()) e.u64(h);
  return e.hash();
}

std::string Registry::describe_entry(std::size_t k) const {
  if (k >= entry_count()) {
    throw make_error(ErrorCategory::usage,
                     "registry entry {} does not exist ({} entries: {} "
                     "groups, {} modules, {} parameters)",
                     k, entry_count(), groups_.size(), modules_.size(), params_.size());
  }
  if (k < groups_.size()) {
    const GroupSpec& g = groups_[k];
    return fmt::format("group {} '{}' weight_decay {} lr_scale {}", k, g.name, g.weight_decay,
                       g.lr_scale);
  }
  k -= groups_.size();
  if (k < modules_.size()) return fmt::format("module {} '{}'", k, modules_[k].name);
  k -= modules_.size();
  const ParamSpec& p = params_[k];
  std::vector<std::string> users;
  users.reserve(p.modules.size());
  for (const std::size_t m : p.modules) {
    users.push_back(fmt::format("{} '{}'", m, modules_[m].name));
  }
  return fmt::format("parameter {} '{}' shape {} {} group {} '{}' modules [{}]", k, p.name,
                     shape_text(p.shape), p.trainable ? "trainable" : "frozen", p.group,
                     groups_[p.group].name, fmt::join(users, ", "));
}

}  // namespace zero::engine
