// optimizer: the type (DeepSpeed's names, case-insensitive; "Adam" is AdamW unless
// adam_w_mode is false) and its params with the defaults of DeepSpeed's own optimizers.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "config/sections.h"

namespace zero::config {
namespace {

// Optimizers DeepSpeed or PyTorch offer that zero does not (lower case).
constexpr std::array<std::string_view, 20> kUnsupportedOptimizers{
    "lamb",  "onebitadam", "zerooneadam", "onebitlamb", "muadam",    "muadamw", "musgd",
    "muon",  "rmsprop",    "adadelta",    "adamax",     "asgd",      "lbfgs",   "nadam",
    "radam", "rprop",      "sparseadam",  "adafactor",  "fusedadam", "cpuadam"};

constexpr std::array<std::string_view, 5> kSupportedOptimizers{"Adam", "AdamW", "Adagrad", "Lion",
                                                               "SGD"};

void read_betas(Section& params, OptimizerConfig& optimizer) {
  Reader& reader = params.reader();
  const std::string path = params.key_path("betas");
  const json* value = params.raw("betas");
  const json fallback = json::array({optimizer.beta1, optimizer.beta2});
  if (value == nullptr || is_auto(*value)) {
    reader.record(path, fallback, Source::default_value, value ? "from \"auto\"" : "");
    return;
  }
  const bool shape_ok =
      value->is_array() && value->size() == 2 && (*value)[0].is_number() && (*value)[1].is_number();
  if (shape_ok) {
    const double b1 = (*value)[0].get<double>(), b2 = (*value)[1].get<double>();
    if (b1 >= 0.0 && b1 < 1.0 && b2 >= 0.0 && b2 < 1.0) {
      optimizer.beta1 = b1;
      optimizer.beta2 = b2;
      reader.record(path, *value,
                    reader.is_overridden(path) ? Source::override_value : Source::file);
      return;
    }
  }
  reader.error(fmt::format("{}: expected two numbers in [0, 1), like [0.9, 0.999], got {}", path,
                           describe(*value)));
}

void reject_max_grad_norm(Section& params) {
  params.declare("max_grad_norm", KeyClass::unsupported, "use gradient_clipping");
  if (params.has("max_grad_norm")) {
    params.reader().error(
        fmt::format("{}: not an optimizer parameter in DeepSpeed configs; use the top-level "
                    "\"gradient_clipping\" instead",
                    params.key_path("max_grad_norm")));
  }
}

void read_params(Section& params, OptimizerConfig& optimizer) {
  constexpr RealRange kLr{0.0, INFINITY};
  constexpr RealRange kNonNegative{0.0, INFINITY};
  constexpr RealRange kEps{0.0, 1.0};
  switch (optimizer.type) {
    case OptimizerType::adam:
    case OptimizerType::adamw: {
      optimizer.lr = params.real({"lr"}, 1e-3, kLr);
      read_betas(params, optimizer);
      optimizer.eps = params.real({"eps"}, 1e-8, kEps);
      optimizer.weight_decay = params.real({"weight_decay"}, 0.0, kNonNegative);
      optimizer.bias_correction = params.boolean({"bias_correction"}, true);
      const bool adam_w_mode = params.boolean({"adam_w_mode"}, true);
      if (optimizer.type == OptimizerType::adam) {
        optimizer.type = adam_w_mode ? OptimizerType::adamw : OptimizerType::adam;
      } else if (params.has("adam_w_mode") && !adam_w_mode) {
        params.reader().warning(
            "optimizer.params.adam_w_mode is false but the type is AdamW, which always decays "
            "weights decoupled (as in DeepSpeed); write \"type\": \"Adam\" for L2 decay");
      }
      params.no_effect_flag("torch_adam", "zero always runs its own fused Adam");
      params.unsupported_flag("amsgrad", "AMSGrad");
      break;
    }
    case OptimizerType::adagrad:
      optimizer.lr = params.real({"lr"}, 1e-2, kLr);
      optimizer.eps = params.real({"eps"}, 1e-10, kEps);
      optimizer.weight_decay = params.real({"weight_decay"}, 0.0, kNonNegative);
      params.unsupported_flag("amsgrad", "AMSGrad");
      for (const auto& [key, what] :
           {std::pair{"lr_decay", "Adagrad lr_decay"},
            std::pair{"initial_accumulator_value", "a non-zero initial accumulator"}}) {
        params.declare(key, KeyClass::unsupported, what);
        if (const double x = params.real({key}, 0.0, {0.0, INFINITY}); x != 0.0) {
          params.reader().not_supported(params.key_path(key), what, x);
        }
      }
      break;
    case OptimizerType::lion:
      optimizer.lr = params.real({"lr"}, 1e-3, kLr);
      read_betas(params, optimizer);
      optimizer.weight_decay = params.real({"weight_decay"}, 0.0, kNonNegative);
      break;
    case OptimizerType::sgd:
      optimizer.lr = params.real({"lr"}, 1e-3, kLr);
      optimizer.momentum = params.real({"momentum"}, 0.0, kNonNegative);
      optimizer.dampening = params.real({"dampening"}, 0.0, kNonNegative);
      optimizer.weight_decay = params.real({"weight_decay"}, 0.0, kNonNegative);
      optimizer.nesterov = params.boolean({"nesterov"}, false);
      if (optimizer.nesterov && (optimizer.momentum <= 0.0 || optimizer.dampening != 0.0)) {
        params.reader().error(fmt::format(
            "optimizer.params.nesterov: Nesterov momentum needs momentum > 0 and dampening 0 "
            "(got momentum {}, dampening {})",
            optimizer.momentum, optimizer.dampening));
      }
      break;
  }
  params.no_effect_flag("fused", "zero's optimizers are always fused");
  params.no_effect_flag("foreach", "zero's optimizers are always fused");
  params.no_effect_flag("capturable", "a PyTorch CUDA-graph detail");
  params.no_effect_flag("differentiable", "a PyTorch autograd detail");
  params.no_effect_flag("set_grad_none", "gradient buffers are the engine's");
  params.unsupported_flag("maximize", "maximizing the objective");
  reject_max_grad_norm(params);
}

}  // namespace

void read_optimizer(Section& root, Config& config) {
  Reader& reader = root.reader();
  Section section = root.child("optimizer");
  OptimizerConfig& optimizer = config.optimizer;

  const json* type = section.raw("type");
  bool known_type = true;  // false: the type is refused, and its params are its own business
  if (!section.present()) {
    reader.info(
        "no optimizer section: using AdamW with DeepSpeed's defaults (lr 1e-3); add "
        "\"optimizer\" to choose");
    reader.record("optimizer.type", "AdamW", Source::default_value);
  } else if (type == nullptr && reader.created_by_override("optimizer")) {
    reader.info("optimizer: only overrides give it; using AdamW with DeepSpeed's defaults");
    reader.record("optimizer.type", "AdamW", Source::default_value);
  } else if (type == nullptr || !type->is_string()) {
    reader.error(fmt::format("optimizer.type: expected one of {}, got {}",
                             "\"Adam\", \"AdamW\", \"Adagrad\", \"Lion\", \"SGD\"",
                             type == nullptr ? "nothing (the key is required)" : describe(*type)));
    known_type = false;
  } else {
    const std::string name = type->get<std::string>();
    const std::string folded = fold_case(name);
    optimizer.name = name;
    if (folded == "adam")
      optimizer.type = OptimizerType::adam;
    else if (folded == "adamw")
      optimizer.type = OptimizerType::adamw;
    else if (folded == "adagrad")
      optimizer.type = OptimizerType::adagrad;
    else if (folded == "lion")
      optimizer.type = OptimizerType::lion;
    else if (folded == "sgd")
      optimizer.type = OptimizerType::sgd;
    else if (std::find(kUnsupportedOptimizers.begin(), kUnsupportedOptimizers.end(), folded) !=
             kUnsupportedOptimizers.end()) {
      reader.error(fmt::format(
          "optimizer.type: \"{}\" is not supported by zero; use one of Adam, AdamW, Adagrad, "
          "Lion, SGD",
          name));
      known_type = false;
    } else {
      std::string nearest;
      std::size_t best = SIZE_MAX;
      for (auto candidate : kSupportedOptimizers) {
        const std::size_t distance = edit_distance(folded, fold_case(candidate));
        if (distance < best) best = distance, nearest = candidate;
      }
      reader.error(fmt::format(
          "optimizer.type: unknown optimizer \"{}\"{}; zero offers Adam, AdamW, Adagrad, Lion, SGD",
          name, best <= 2 ? fmt::format(" (did you mean {}?)", nearest) : ""));
      known_type = false;
    }
  }
  section.no_effect("legacy_fusion", "a DeepSpeed fp16 wrapper detail");

  Section params = section.child("params");
  // A refused type says only that: its params (Lamb's max_coeff, ...) are not read as
  // AdamW's, which would report them as unknown keys too.
  if (known_type) {
    read_params(params, optimizer);
    params.finish();
  }
  section.finish();
  if (type != nullptr && type->is_string()) {
    reader.record("optimizer.type", optimizer.name,
                  reader.is_overridden("optimizer.type") ? Source::override_value : Source::file,
                  fmt::format("runs as {}", optimizer_name(optimizer.type)));
  }
}

}  // namespace zero::config
