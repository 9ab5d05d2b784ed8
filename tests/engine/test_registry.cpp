// Tests of engine/plan/registry.h: registration order and indices, numel, tied and frozen
// parameters, every usage error with its message, and the per-entry hashes and descriptions the
// engine's cross-rank check relies on.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/plan/registry.h"

namespace {

using zero::Error;
using zero::ErrorCategory;
using zero::engine::Registry;

// Runs `call`, requires a usage Error and returns its message.
template <typename Call>
std::string usage_error(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    REQUIRE(e.category() == ErrorCategory::usage);
    return e.what();
  }
  FAIL("expected a usage error, none was thrown");
  return {};
}

// A small GPT-like model: groups default (wd 0.1) and no_decay; modules wte, h.0.attn, ln_f,
// lm_head; wte.w tied between wte and lm_head, a frozen bias, a scalar.
struct Model {
  double default_wd = 0.1;
  std::string group_name = "no_decay";
  double group_wd = 0.0;
  double group_lr_scale = 1.0;
  std::string module_name = "h.0.attn";
  std::string param_name = "h.0.attn.w";
  std::vector<std::int64_t> param_shape = {768, 2304};
  bool param_trainable = true;
  std::size_t param_group = 1;
  std::vector<std::size_t> tied_modules = {0, 3};

  Registry build() const {
    Registry r(default_wd);
    r.add_group(group_name, group_wd, group_lr_scale);
    r.add_module("wte");
    r.add_module(module_name);
    r.add_module("ln_f");
    r.add_module("lm_head");
    r.add_param("wte.w", {50304, 768}, true, 0, tied_modules);
    r.add_param("h.0.attn.b", {2304}, false, 1, {1});
    r.add_param("ln_f.g", {}, true, 1, {2});
    r.add_param(param_name, param_shape, param_trainable, param_group, {1});
    return r;
  }
};

// Entry positions in entry_hashes() order: 2 groups, 4 modules, then 4 parameters.
constexpr std::size_t kGroupNoDecay = 1;
constexpr std::size_t kModuleAttn = 2 + 1;
constexpr std::size_t kParamWte = 2 + 4 + 0;
constexpr std::size_t kParamAttnW = 2 + 4 + 3;

std::vector<std::size_t> differing_entries(const Registry& a, const Registry& b) {
  const std::vector<std::uint64_t> ha = a.entry_hashes();
  const std::vector<std::uint64_t> hb = b.entry_hashes();
  REQUIRE(ha.size() == hb.size());
  std::vector<std::size_t> differ;
  for (std::size_t k = 0; k < ha.size(); ++k) {
    if (ha[k] != hb[k]) differ.push_back(k);
  }
  return differ;
}

}  // namespace

TEST_CASE("registry entries take indices in registration order", "[engine]") {
  Registry r;
  REQUIRE(r.add_group("no_decay", 0.0, 1.0) == 1);
  REQUIRE(r.add_group("embeddings", 0.0, 0.5) == 2);
  REQUIRE(r.add_module("a") == 0);
  REQUIRE(r.add_module("b") == 1);
  REQUIRE(r.add_param("b.w", {4, 4}, true, 0, {1}) == 0);
  REQUIRE(r.add_param("a.w", {4}, true, 2, {0}) == 1);
  REQUIRE(r.add_param("b.b", {4}, true, 1, {1}) == 2);

  REQUIRE(r.group_count() == 3);
  REQUIRE(r.module_count() == 2);
  REQUIRE(r.param_count() == 3);
  REQUIRE(r.entry_count() == 8);
  REQUIRE(r.groups()[2].name == "embeddings");
  REQUIRE(r.group(2).lr_scale == 0.5);
  REQUIRE(r.modules()[1].name == "b");
  REQUIRE(r.module(1).params == std::vector<std::size_t>{0, 2});
  REQUIRE(r.module(0).params == std::vector<std::size_t>{1});
  REQUIRE(r.params()[1].name == "a.w");
  REQUIRE(r.param(1).group == 2);
  REQUIRE(r.find_param("b.b") == std::optional<std::size_t>(2));
  REQUIRE(r.find_module("b") == std::optional<std::size_t>(1));
  REQUIRE(r.find_group("embeddings") == std::optional<std::size_t>(2));
}

TEST_CASE("find returns nothing for a name that is not registered", "[engine]") {
  Registry r;
  r.add_module("a");
  r.add_param("a.w", {2}, true, 0, {0});
  REQUIRE_FALSE(r.find_param("a.b").has_value());
  REQUIRE_FALSE(r.find_param("a").has_value());  // a module's name is not a parameter's
  REQUIRE_FALSE(r.find_module("a.w").has_value());
  REQUIRE_FALSE(r.find_group("no_decay").has_value());
}

TEST_CASE("group 0 is the default group with the optimizer's weight decay", "[engine]") {
  const Registry r(0.01);
  REQUIRE(r.group_count() == 1);
  REQUIRE(r.group(0).name == "default");
  REQUIRE(r.group(0).weight_decay == 0.01);
  REQUIRE(r.group(0).lr_scale == 1.0);
  REQUIRE(r.find_group("default") == std::optional<std::size_t>(0));
  REQUIRE(Registry().group(0).weight_decay == 0.0);
}

TEST_CASE("numel is the product of the shape, 1 for a scalar and 0 with a zero dim", "[engine]") {
  Registry r;
  r.add_module("m");
  r.add_param("matrix", {3, 5, 7}, true, 0, {0});
  r.add_param("scalar", {}, true, 0, {0});
  r.add_param("empty", {4, 0, 9}, true, 0, {0});
  r.add_param("vector", {11}, true, 0, {0});
  REQUIRE(r.param(0).numel == 105);
  REQUIRE(r.param(1).numel == 1);
  REQUIRE(r.param(1).shape.empty());
  REQUIRE(r.param(2).numel == 0);
  REQUIRE(r.param(2).shape == std::vector<std::int64_t>{4, 0, 9});
  REQUIRE(r.param(3).numel == 11);
  REQUIRE(r.total_numel() == 105 + 1 + 0 + 11);
}

TEST_CASE("a numel of exactly 2^62 is accepted", "[engine]") {
  Registry r;
  r.add_module("m");
  r.add_param("huge", {std::int64_t{1} << 31, std::int64_t{1} << 31}, false, 0, {0});
  REQUIRE(r.param(0).numel == Registry::kMaxNumel);
  REQUIRE(r.total_numel() == Registry::kMaxNumel);
}

TEST_CASE("a tied parameter appears in the list of every module that uses it", "[engine]") {
  const Registry r = Model{}.build();
  const std::size_t wte = *r.find_param("wte.w");
  REQUIRE(r.param(wte).modules == std::vector<std::size_t>{0, 3});
  REQUIRE(r.module(0).params == std::vector<std::size_t>{wte});
  REQUIRE(r.module(3).params == std::vector<std::size_t>{wte});
  REQUIRE(r.module(1).params == std::vector<std::size_t>{1, 3});
  REQUIRE(r.module(2).params == std::vector<std::size_t>{2});
}

TEST_CASE("a tied parameter keeps its modules in the order given", "[engine]") {
  Model m;
  m.tied_modules = {3, 0};
  const Registry r = m.build();
  REQUIRE(r.param(0).modules == std::vector<std::size_t>{3, 0});
}

TEST_CASE("trainable_numel leaves out frozen parameters, total_numel counts all", "[engine]") {
  const Registry r = Model{}.build();
  const std::size_t wte = 50304 * 768, bias = 2304, gain = 1, attn = 768 * 2304;
  REQUIRE_FALSE(r.param(1).trainable);
  REQUIRE(r.trainable_numel() == wte + gain + attn);
  REQUIRE(r.total_numel() == wte + bias + gain + attn);
}

TEST_CASE("add_group refuses a name already registered", "[engine]") {
  Registry r;
  r.add_group("no_decay", 0.0, 1.0);
  REQUIRE(usage_error([&] { r.add_group("no_decay", 0.1, 1.0); }) ==
          "add_group 'no_decay': a group of that name is already registered (group 1); group "
          "names must be unique");
  REQUIRE(usage_error([&] { r.add_group("default", 0.1, 1.0); }) ==
          "add_group 'default': a group of that name is already registered (group 0); group "
          "names must be unique");
  REQUIRE(r.group_count() == 2);
}

TEST_CASE("add_group refuses a negative or non-finite weight decay or lr scale", "[engine]") {
  Registry r;
  REQUIRE(usage_error([&] { r.add_group("g", -0.1, 1.0); }) ==
          "add_group 'g': weight_decay -0.1 must be finite and >= 0");
  REQUIRE(usage_error([&] { r.add_group("g", std::nan(""), 1.0); }) ==
          "add_group 'g': weight_decay nan must be finite and >= 0");
  REQUIRE(usage_error([&] { r.add_group("g", 0.0, -1.0); }) ==
          "add_group 'g': lr_scale -1 must be finite and >= 0");
  REQUIRE(usage_error([&] { r.add_group("g", 0.0, HUGE_VAL); }) ==
          "add_group 'g': lr_scale inf must be finite and >= 0");
  REQUIRE(r.group_count() == 1);
  REQUIRE(r.add_group("g", 0.0, 0.0) == 1);  // lr scale 0 is allowed
}

TEST_CASE("the default group refuses a negative weight decay", "[engine]") {
  REQUIRE(usage_error([] { Registry r(-1.0); }) ==
          "registry: the default group's weight_decay -1 must be finite and >= 0");
}

TEST_CASE("add_module refuses a name already registered", "[engine]") {
  Registry r;
  r.add_module("h.0");
  REQUIRE(usage_error([&] { r.add_module("h.0"); }) ==
          "add_module 'h.0': a module of that name is already registered (module 0); module "
          "names must be unique");
  REQUIRE(r.module_count() == 1);
}

TEST_CASE("add_param refuses a name already registered", "[engine]") {
  Registry r;
  r.add_module("m");
  r.add_param("m.w", {2}, true, 0, {0});
  REQUIRE(usage_error([&] { r.add_param("m.w", {3}, true, 0, {0}); }) ==
          "add_param 'm.w': a parameter of that name is already registered (parameter 0); "
          "parameter names must be unique");
  REQUIRE(r.param_count() == 1);
  REQUIRE(r.module(0).params.size() == 1);
}

TEST_CASE("every add refuses an empty name", "[engine]") {
  Registry r;
  r.add_module("m");
  const std::string expected = ": the name is empty; every entry needs a unique, non-empty name";
  REQUIRE(usage_error([&] { r.add_group("", 0.0, 1.0); }) == "add_group" + expected);
  REQUIRE(usage_error([&] { r.add_module(""); }) == "add_module" + expected);
  REQUIRE(usage_error([&] { r.add_param("", {1}, true, 0, {0}); }) == "add_param" + expected);
  REQUIRE(r.entry_count() == 2);
}

TEST_CASE("add_param refuses a group that does not exist", "[engine]") {
  Registry r;
  r.add_group("no_decay", 0.0, 1.0);
  r.add_module("m");
  REQUIRE(usage_error([&] { r.add_param("m.w", {2}, true, 2, {0}); }) ==
          "add_param 'm.w': group index 2 does not exist (2 groups registered)");
  REQUIRE(r.param_count() == 0);
}

TEST_CASE("add_param refuses a module that does not exist", "[engine]") {
  Registry r;
  r.add_module("a");
  r.add_module("b");
  r.add_module("c");
  REQUIRE(usage_error([&] {
            r.add_param("w", {2}, true, 0, {1, 3});
          }) == "add_param 'w': module index 3 does not exist (3 modules registered)");
  REQUIRE(r.param_count() == 0);
  REQUIRE(r.module(1).params.empty());  // nothing half-registered
}

TEST_CASE("add_param refuses an empty module list", "[engine]") {
  Registry r;
  r.add_module("a");
  REQUIRE(usage_error([&] { r.add_param("w", {2}, true, 0, {}); }) ==
          "add_param 'w': the list of modules that use it is empty; give at least one module "
          "index (from add_module)");
  REQUIRE(r.param_count() == 0);
}

TEST_CASE("add_param refuses a module listed twice", "[engine]") {
  Registry r;
  r.add_module("wte");
  r.add_module("lm_head");
  REQUIRE(usage_error([&] {
            r.add_param("wte.w", {8, 4}, true, 0, {1, 0, 1});
          }) ==
          "add_param 'wte.w': module 1 'lm_head' is listed twice; list each module that uses "
          "the parameter once");
  REQUIRE(r.param_count() == 0);
  REQUIRE(r.module(0).params.empty());
  REQUIRE(r.module(1).params.empty());
}

TEST_CASE("add_param refuses a negative dimension", "[engine]") {
  Registry r;
  r.add_module("m");
  // Even behind a zero dim, which would make numel 0.
  REQUIRE(usage_error([&] {
            r.add_param("w", {0, 3, -1}, true, 0, {0});
          }) ==
          "add_param 'w': dimension 2 of shape [0, 3, -1] is negative; dimensions must be >= 0");
  REQUIRE(r.param_count() == 0);
}

TEST_CASE("add_param refuses a shape of more than 2^62 elements", "[engine]") {
  Registry r;
  r.add_module("m");
  const std::int64_t big = std::int64_t{1} << 31;
  REQUIRE(usage_error([&] {
            r.add_param("w", {big, big, 2}, true, 0, {0});
          }) == "add_param 'w': shape [2147483648, 2147483648, 2] has more than 2^62 elements");
  // A product that wraps around 2^64 to a small number is caught too.
  REQUIRE(usage_error([&] {
            r.add_param("w", {big * 2, big * 2, 4}, true, 0, {0});
          }) == "add_param 'w': shape [4294967296, 4294967296, 4] has more than 2^62 elements");
  REQUIRE(r.param_count() == 0);
}

TEST_CASE("add_param refuses parameters that together exceed 2^62 elements", "[engine]") {
  Registry r;
  r.add_module("m");
  const std::int64_t half = std::int64_t{1} << 61;
  r.add_param("a", {half}, true, 0, {0});
  r.add_param("b", {half}, false, 0, {0});
  REQUIRE(usage_error([&] { r.add_param("c", {1}, true, 0, {0}); }) ==
          "add_param 'c': its 1 elements would bring the registered parameters past 2^62 "
          "elements (4611686018427387904 registered so far)");
  REQUIRE(r.param_count() == 2);
}

TEST_CASE("every add after freeze says registration is closed", "[engine]") {
  Registry r;
  r.add_module("m");
  REQUIRE_FALSE(r.frozen());
  r.freeze();
  REQUIRE(r.frozen());
  const std::string closed =
      "': registration is closed after init; register every group, "
      "module and parameter before the engine's init";
  REQUIRE(usage_error([&] { r.add_group("late_group", 0.0, 1.0); }) ==
          "add_group 'late_group" + closed);
  REQUIRE(usage_error([&] { r.add_module("late_module"); }) == "add_module 'late_module" + closed);
  REQUIRE(usage_error([&] { r.add_param("late.w", {2}, true, 0, {0}); }) ==
          "add_param 'late.w" + closed);
  r.freeze();  // a second freeze changes nothing
  REQUIRE(r.frozen());
  REQUIRE(r.entry_count() == 2);
}

TEST_CASE("accessors refuse an index out of range", "[engine]") {
  const Registry r = Model{}.build();
  REQUIRE(usage_error([&] { r.group(2); }) == "group index 2 does not exist (2 groups registered)");
  REQUIRE(usage_error([&] { r.module(4); }) ==
          "module index 4 does not exist (4 modules registered)");
  REQUIRE(usage_error([&] { r.param(4); }) ==
          "parameter index 4 does not exist (4 parameters registered)");
  REQUIRE(usage_error([&] { r.describe_entry(10); }) ==
          "registry entry 10 does not exist (10 entries: 2 groups, 4 modules, 4 parameters)");
}

TEST_CASE("the same registration gives the same entry hashes and hash", "[engine]") {
  const Registry a = Model{}.build();
  const Registry b = Model{}.build();
  REQUIRE(a.entry_hashes().size() == a.entry_count());
  REQUIRE(a.entry_hashes() == b.entry_hashes());
  REQUIRE(a.hash() == b.hash());
  // A frozen copy hashes the same: freezing is not part of what ranks must agree on.
  Registry c = Model{}.build();
  c.freeze();
  REQUIRE(c.hash() == a.hash());
}

TEST_CASE("changing one attribute changes exactly that entry's hash and the combined hash",
          "[engine]") {
  struct Case {
    const char* what;
    std::function<void(Model&)> change;
    std::size_t entry;
  };
  const std::vector<Case> cases = {
      {"parameter shape",
       [](Model& m) {
         m.param_shape = {2304, 768};
       },
       kParamAttnW},
      {"parameter shape rank",
       [](Model& m) {
         m.param_shape = {768, 2304, 1};
       },
       kParamAttnW},
      {"parameter name", [](Model& m) { m.param_name = "h.0.attn.W"; }, kParamAttnW},
      {"parameter trainable", [](Model& m) { m.param_trainable = false; }, kParamAttnW},
      {"parameter group", [](Model& m) { m.param_group = 0; }, kParamAttnW},
      {"parameter module order",
       [](Model& m) {
         m.tied_modules = {3, 0};
       },
       kParamWte},
      {"parameter module list",
       [](Model& m) {
         m.tied_modules = {0, 2};
       },
       kParamWte},
      {"group weight decay", [](Model& m) { m.group_wd = 1e-300; }, kGroupNoDecay},
      {"group lr scale", [](Model& m) { m.group_lr_scale = 0.5; }, kGroupNoDecay},
      {"group name", [](Model& m) { m.group_name = "no-decay"; }, kGroupNoDecay},
      {"default weight decay", [](Model& m) { m.default_wd = 0.01; }, 0},
      {"module name", [](Model& m) { m.module_name = "h.0.mlp"; }, kModuleAttn},
  };
  const Registry base = Model{}.build();
  for (const Case& c : cases) {
    INFO(c.what);
    Model changed;
    c.change(changed);
    const Registry other = changed.build();
    REQUIRE(differing_entries(base, other) == std::vector<std::size_t>{c.entry});
    REQUIRE(other.hash() != base.hash());
  }
}

TEST_CASE("the combined hash covers the number and order of entries", "[engine]") {
  const Registry base = Model{}.build();
  Registry more = Model{}.build();
  more.add_module("unused");
  REQUIRE(more.hash() != base.hash());

  Registry ab;
  ab.add_module("a");
  ab.add_module("b");
  Registry ba;
  ba.add_module("b");
  ba.add_module("a");
  REQUIRE(ab.hash() != ba.hash());

  // A group and a module of the same name are different entries.
  Registry as_group;
  as_group.add_group("x", 0.0, 1.0);
  Registry as_module;
  as_module.add_module("x");
  REQUIRE(as_group.hash() != as_module.hash());
}

TEST_CASE("describe_entry describes groups, modules and parameters in hash order", "[engine]") {
  Model m;
  m.group_wd = 0.0;
  m.group_lr_scale = 0.25;
  const Registry r = m.build();
  const std::vector<std::string> expected = {
      "group 0 'default' weight_decay 0.1 lr_scale 1",
      "group 1 'no_decay' weight_decay 0 lr_scale 0.25",
      "module 0 'wte'",
      "module 1 'h.0.attn'",
      "module 2 'ln_f'",
      "module 3 'lm_head'",
      "parameter 0 'wte.w' shape [50304, 768] trainable group 0 'default' modules [0 'wte', "
      "3 'lm_head']",
      "parameter 1 'h.0.attn.b' shape [2304] frozen group 1 'no_decay' modules [1 'h.0.attn']",
      "parameter 2 'ln_f.g' shape [] trainable group 1 'no_decay' modules [2 'ln_f']",
      "parameter 3 'h.0.attn.w' shape [768, 2304] trainable group 1 'no_decay' modules "
      "[1 'h.0.attn']",
  };
  REQUIRE(r.entry_count() == expected.size());
  for (std::size_t k = 0; k < expected.size(); ++k) REQUIRE(r.describe_entry(k) == expected[k]);
}

TEST_CASE("the first differing entry hash names the parameter that differs between ranks",
          "[engine]") {
  Model other_rank;
  other_rank.param_shape = {768, 2303};
  const Registry mine = Model{}.build();
  const Registry theirs = other_rank.build();
  const std::vector<std::size_t> differ = differing_entries(mine, theirs);
  REQUIRE_FALSE(differ.empty());
  REQUIRE(mine.describe_entry(differ.front()) ==
          "parameter 3 'h.0.attn.w' shape [768, 2304] trainable group 1 'no_decay' modules "
          "[1 'h.0.attn']");
  REQUIRE(theirs.describe_entry(differ.front()) ==
          "parameter 3 'h.0.attn.w' shape [768, 2303] trainable group 1 'no_decay' modules "
          "[1 'h.0.attn']");
}
