// fp16 (with DeepSpeed's loss-scaling keys), bf16/bfloat16, and the dtypes of gradient
// accumulation and communication, which default to the compute dtype.
#include <cmath>

#include <fmt/format.h>

#include "config/sections.h"

namespace zero::config {
namespace {

DType read_dtype(Section& section, std::string_view key, DType fallback, std::string_view why,
                 std::initializer_list<std::string_view> extra_spellings = {}) {
  const json* value = section.raw(key);
  Reader& reader = section.reader();
  const std::string path = section.key_path(key);
  if (value == nullptr || value->is_null() || is_auto(*value)) {
    reader.record(path, std::string(dtype_name(fallback)), Source::derived, std::string(why));
    return fallback;
  }
  if (value->is_string()) {
    std::string folded = fold_case(value->get<std::string>());
    for (auto spelling : extra_spellings) {
      if (folded == spelling) folded = "bf16";  // DeepSpeed's old "bfp16"
    }
    if (auto dtype = parse_dtype(folded); dtype && *dtype != DType::i64) {
      reader.record(path, std::string(dtype_name(*dtype)),
                    reader.is_overridden(path) ? Source::override_value : Source::file);
      return *dtype;
    }
  }
  reader.error(fmt::format("{}: expected one of \"fp32\", \"fp16\", \"bf16\", got {}", path,
                           describe(*value)));
  return fallback;
}

}  // namespace

void read_precision(Section& root, Config& config) {
  Reader& reader = root.reader();

  Section fp16 = root.child("fp16");
  config.fp16.enabled = fp16.boolean({"enabled"}, false);
  config.fp16.auto_cast = fp16.boolean({"auto_cast"}, false);
  config.fp16.loss_scale = fp16.real({"loss_scale"}, 0.0, {0.0, INFINITY});
  config.fp16.initial_scale_power = fp16.integer({"initial_scale_power"}, 16, {0, 127});
  config.fp16.loss_scale_window = fp16.integer({"loss_scale_window"}, 1000, kPositive);
  config.fp16.hysteresis = fp16.integer({"hysteresis"}, 2, kPositive);
  config.fp16.consecutive_hysteresis = fp16.boolean({"consecutive_hysteresis"}, false);
  config.fp16.min_loss_scale = fp16.real({"min_loss_scale"}, 1.0, {0.0, INFINITY, true});
  fp16.unsupported_flag("fp16_master_weights_and_grads", "fp16 master weights and gradients");
  fp16.finish();

  // "bf16" and its older spelling "bfloat16".
  const bool bf16_given = root.has("bf16") && !root.peek("bf16")->is_null();
  if (bf16_given && root.has("bfloat16") && !root.peek("bfloat16")->is_null()) {
    reader.error("bf16: given together with its alias bfloat16; keep one");
  }
  Section bf16 = root.has("bfloat16") && !bf16_given ? root.child("bfloat16") : root.child("bf16");
  root.declare(bf16.path() == "bf16" ? "bfloat16" : "bf16", KeyClass::implemented, "alias of bf16");
  const bool bf16_enabled = bf16.boolean({"enabled"}, false);
  bf16.no_effect_flag("immediate_grad_update",
                      "gradients always go straight into their bucket as each module finishes");
  config.bf16_check_grad_overflow = bf16.boolean({"check_grad_overflow"}, true);
  bf16.unsupported_flag("bf16_master_weights_and_grads", "bf16 master weights and gradients");
  const bool bf16_states = bf16.boolean({"bf16_optimizer_states"}, false);
  bf16.finish();
  if (bf16_states && !bf16_enabled) {
    reader.error(
        "bf16.bf16_optimizer_states is true but bf16.enabled is not: bf16 optimizer "
        "states need bf16 training");
  }
  config.optimizer_state_dtype = bf16_states ? DType::bf16 : DType::f32;

  if (config.fp16.enabled && bf16_enabled) {
    reader.error(
        "fp16.enabled and bf16.enabled are both true; enable one (bf16 needs no loss scaling)");
  }
  config.precision = config.fp16.enabled ? Precision::fp16
                     : bf16_enabled      ? Precision::bf16
                                         : Precision::fp32;
  reader.record("precision", std::string(precision_name(config.precision)), Source::derived,
                "from fp16.enabled and bf16.enabled");

  const DType compute = config.compute_dtype();
  config.communication_data_type =
      read_dtype(root, "communication_data_type", compute, "the compute dtype", {"bfp16"});
  Section data_types = root.child("data_types");
  config.grad_accum_dtype =
      read_dtype(data_types, "grad_accum_dtype", compute, "the compute dtype");
  data_types.declare("param_dtype", KeyClass::unsupported,
                     "a parameter dtype other than the precision's");
  if (const json* param = data_types.peek("param_dtype");
      param != nullptr && !param->is_null() && !is_auto(*param)) {
    const auto dtype = param->is_string() ? parse_dtype(param->get<std::string>()) : std::nullopt;
    if (dtype != compute) {
      reader.error(fmt::format(
          "data_types.param_dtype: {} differs from the precision's dtype {} (fp16.enabled / "
          "bf16.enabled choose the parameter dtype)",
          describe(*param), dtype_name(compute)));
    }
  }
  data_types.no_effect("buffer_dtype", "zero registers parameters only, not buffers");
  data_types.finish();

  config.prescale_gradients = root.boolean({"prescale_gradients"}, false);
  config.gradient_predivide_factor =
      root.real({"gradient_predivide_factor"}, 1.0, {0.0, INFINITY, true});
}

}  // namespace zero::config
