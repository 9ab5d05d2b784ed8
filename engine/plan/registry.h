// The parameter registry: what a model declares before init. It holds the parameter groups
// (weight decay and lr scale, so that biases and norms can skip decay), the modules in forward
// order, and the parameters (name, shape, trainable, group, the modules that use them). Bucket
// membership, the stage-3 gather plan and the flat-buffer layout are all computed from it, so
// every rank must register the same list in the same order: the engine compares hash() across
// ranks at init and, on a mismatch, finds the first differing entry_hashes() element and names
// it with describe_entry(). After init the registry is frozen and never changes.
//
// Indices are positions in registration order and are what the rest of the engine uses; names
// are for people (messages, checkpoints). Not thread-safe: register from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zero::engine {

// "[3, 4]": a shape as messages print it.
std::string shape_text(const std::vector<std::int64_t>& shape);

// A parameter group. Group 0 always exists ("default"), with the optimizer's weight decay.
struct GroupSpec {
  std::string name;
  double weight_decay = 0.0;  // finite, >= 0
  double lr_scale = 1.0;      // finite, >= 0; multiplies the scheduled learning rate
};

// A module: the unit the hooks gather, release and reduce. `params` lists the parameters that
// name it, in their registration order (filled by add_param).
struct ModuleSpec {
  std::string name;
  std::vector<std::size_t> params;
};

struct ParamSpec {
  std::string name;
  std::vector<std::int64_t> shape;  // dims >= 0; a scalar is {} (numel 1); a 0 dim gives numel 0
  std::size_t numel = 0;            // the product of shape, at most 2^62
  bool trainable = true;            // false: frozen, no gradient, no optimizer state
  std::size_t group = 0;
  // The modules that use it, in the order given, without repeats, at least one. A tied weight
  // (embedding and output projection) lists two or more.
  std::vector<std::size_t> modules;
};

class Registry {
 public:
  // The largest numel of one parameter, and of all parameters together.
  static constexpr std::size_t kMaxNumel = std::size_t{1} << 62;

  // Creates group 0, "default", with the optimizer's weight decay and lr scale 1. Throws a
  // usage Error when the weight decay is negative or not finite.
  explicit Registry(double default_weight_decay = 0.0);

  // Each add_* returns the new entry's index and throws a usage Error naming the entry and what
  // is wrong (nothing is added then) when:
  //   - the registry is frozen (registration is closed after init);
  //   - the name is empty or already taken by an entry of the same kind (groups, modules and
  //     parameters each have their own names);
  // and, for groups, when weight_decay or lr_scale is negative or not finite; for parameters,
  // when a dim is negative, numel would exceed kMaxNumel (alone or added to the parameters
  // already registered), the group does not exist, `modules` is empty, names a module that
  // does not exist, or names one twice.
  std::size_t add_group(std::string name, double weight_decay, double lr_scale);
  std::size_t add_module(std::string name);
  std::size_t add_param(std::string name, std::vector<std::int64_t> shape, bool trainable,
                        std::size_t group, std::vector<std::size_t> modules);

  std::optional<std::size_t> find_group(std::string_view name) const;
  std::optional<std::size_t> find_module(std::string_view name) const;
  std::optional<std::size_t> find_param(std::string_view name) const;

  const std::vector<GroupSpec>& groups() const noexcept { return groups_; }
  const std::vector<ModuleSpec>& modules() const noexcept { return modules_; }
  const std::vector<ParamSpec>& params() const noexcept { return params_; }
  // Throw a usage Error naming the index and the count when the index is out of range.
  const GroupSpec& group(std::size_t index) const;
  const ModuleSpec& module(std::size_t index) const;
  const ParamSpec& param(std::size_t index) const;

  std::size_t group_count() const noexcept { return groups_.size(); }
  std::size_t module_count() const noexcept { return modules_.size(); }
  std::size_t param_count() const noexcept { return params_.size(); }
  // groups + modules + params: the length of entry_hashes().
  std::size_t entry_count() const noexcept;

  std::size_t trainable_numel() const noexcept { return trainable_numel_; }
  std::size_t total_numel() const noexcept { return total_numel_; }

  // Closes registration; the engine calls it at init. Calling it again does nothing.
  void freeze() noexcept { frozen_ = true; }
  bool frozen() const noexcept { return frozen_; }

  // One XXH3-64 hash per entry, in the order all groups, all modules, all parameters, each over
  // a fixed little-endian encoding of the entry's kind and everything that matters about it:
  // a group's name, weight decay and lr scale (exact bit patterns), a module's name, a
  // parameter's name, shape, trainable flag, group index and module indices in order. The same
  // registration gives the same hashes on every host.
  std::vector<std::uint64_t> entry_hashes() const;
  // One hash of the whole registry: the three counts and every entry hash, in order.
  std::uint64_t hash() const;
  // Entry k of entry_hashes(), for the mismatch message, e.g.
  //   group 1 'no_decay' weight_decay 0 lr_scale 1
  //   module 2 'h.0.attn'
  //   parameter 3 'h.0.attn.w' shape [768, 2304] trainable group 1 'no_decay'
  //     modules [2 'h.0.attn']     (one line; broken here to fit)
  // (the number is the index among entries of its kind; a frozen parameter says "frozen").
  // Throws a usage Error when k >= entry_count().
  std::string describe_entry(std::size_t k) const;

 private:
  void check_open(std::string_view call, std::string_view name) const;

  std::vector<GroupSpec> groups_;
  std::vector<ModuleSpec> modules_;
  std::vector<ParamSpec> params_;
  std::map<std::string, std::size_t, std::less<>> group_index_;
  std::map<std::string, std::size_t, std::less<>> module_index_;
  std::map<std::string, std::size_t, std::less<>> param_index_;
  std::size_t trainable_numel_ = 0;
  std::size_t total_numel_ = 0;
  bool frozen_ = false;
};

}  // namespace zero::engine
