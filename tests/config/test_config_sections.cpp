// The sections: precision, optimizer, scheduler, zero_optimization and offload, aio,
// checkpoint; the four key classes; and the configs DeepSpeed users already have.
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "config/config_test_util.h"

namespace zero::config {
using namespace zero::config::test;

namespace {
// A minimal valid config with `extra` members added at the top level.
std::string with(const std::string& extra) {
  return "{\"train_batch_size\": 8" + (extra.empty() ? "" : ", " + extra) + "}";
}
}  // namespace

// ---------------------------------------------------------------------------- examples

TEST_CASE("examples: the issue's stage 2 bf16 config loads unchanged on 8 ranks",
          "[config][examples]") {
  const Config config = read(
      R"({"bf16":{"enabled":true},"zero_optimization":{"stage":2,"allgather_partitions":true,"allgather_bucket_size":5e8,"reduce_scatter":true,"reduce_bucket_size":5e8,"overlap_comm":true,"contiguous_gradients":true},"gradient_accumulation_steps":"auto","gradient_clipping":1.0,"train_batch_size":64,"train_micro_batch_size_per_gpu":"auto"})",
      8);
  REQUIRE(config.precision == Precision::bf16);
  REQUIRE(config.zero.stage == 2);
  REQUIRE(config.zero.reduce_bucket_size == 500'000'000);
  REQUIRE(config.zero.overlap_comm);
  REQUIRE(config.batch.micro_batch_per_gpu == 8);
  REQUIRE(config.batch.gradient_accumulation_steps == 1);
  REQUIRE(config.gradient_clipping == 1.0);
  REQUIRE(config.grad_accum_dtype == DType::bf16);
}

TEST_CASE("examples: the issue's stage 3 fp16 offload config loads unchanged on 8 ranks",
          "[config][examples]") {
  const Config config = read(
      R"({"zero_optimization":{"stage":3,"offload_optimizer":{"device":"cpu","pin_memory":true},"offload_param":{"device":"cpu","pin_memory":true},"overlap_comm":true,"stage3_max_live_parameters":1e9,"stage3_max_reuse_distance":1e9,"stage3_prefetch_bucket_size":5e7,"stage3_param_persistence_threshold":1e6,"reduce_bucket_size":5e8,"contiguous_gradients":true},"fp16":{"enabled":true,"loss_scale":0},"optimizer":{"type":"AdamW","params":{"lr":5e-5}},"scheduler":{"type":"WarmupLR","params":{"warmup_min_lr":0,"warmup_max_lr":5e-5}},"gradient_clipping":1.0,"train_batch_size":32,"train_micro_batch_size_per_gpu":4,"steps_per_print":100})",
      8);
  REQUIRE(config.precision == Precision::fp16);
  REQUIRE(config.fp16.dynamic());
  REQUIRE(config.zero.stage == 3);
  REQUIRE(config.zero.offload_optimizer.device == OffloadDevice::cpu);
  REQUIRE(config.zero.offload_param.device == OffloadDevice::cpu);
  REQUIRE(config.zero.offload_param.pin_memory == true);
  REQUIRE(config.zero.param_persistence_threshold == 1'000'000);
  REQUIRE(config.batch.gradient_accumulation_steps == 1);
  REQUIRE(config.optimizer.type == OptimizerType::adamw);
  REQUIRE(config.optimizer.lr == 5e-5);
  REQUIRE(config.scheduler.type == SchedulerType::warmup_lr);
  REQUIRE(config.scheduler.warmup_num_steps == 1000);
  REQUIRE(config.steps_per_print == 100);
  REQUIRE(has_line(config.infos,
                   "zero_optimization.contiguous_gradients: accepted, no effect here: every "
                   "rank's shards are always one contiguous buffer per dtype"));
}

TEST_CASE("examples: every shipped config loads on 1, 2 and 4 ranks", "[config][examples]") {
  std::size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ZERO_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".json") continue;
    for (int world : {1, 2, 4}) {
      CAPTURE(entry.path().string(), world);
      ReadOptions options;
      options.world_size = world;
      // A fine-tune config leaves the schedule's length to zero-train --steps.
      std::ifstream in(entry.path());
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      if (text.find("\"total_num_steps\": \"auto\"") != std::string::npos) {
        options.overrides.push_back(parse_override("scheduler.params.total_num_steps=1000"));
      }
      REQUIRE_NOTHROW(read_config_file(entry.path().string(), options));
    }
    ++count;
  }
  REQUIRE(count >= 7);
}

// ---------------------------------------------------------------------------- precision

TEST_CASE("precision: fp16 takes DeepSpeed's loss-scaling defaults", "[config][precision]") {
  const Config config = read(with(R"("fp16": {"enabled": true})"));
  REQUIRE(config.precision == Precision::fp16);
  REQUIRE(config.fp16.dynamic());
  REQUIRE(config.fp16.initial_scale_power == 16);
  REQUIRE(config.fp16.loss_scale_window == 1000);
  REQUIRE(config.fp16.hysteresis == 2);
  REQUIRE_FALSE(config.fp16.consecutive_hysteresis);
  REQUIRE(config.fp16.min_loss_scale == 1.0);
  REQUIRE(config.compute_dtype() == DType::f16);
  REQUIRE(config.communication_data_type == DType::f16);
}

TEST_CASE("precision: fp16 and bf16 together are refused", "[config][precision]") {
  REQUIRE(error_of(with(R"("fp16": {"enabled": true}, "bf16": {"enabled": true})")) ==
          "fp16.enabled and bf16.enabled are both true; enable one (bf16 needs no loss scaling)");
}

TEST_CASE("precision: both \"auto\" means fp32", "[config][precision]") {
  const Config config = read(with(R"("fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"})"));
  REQUIRE(config.precision == Precision::fp32);
  REQUIRE(resolved(config, "fp16.enabled").note == "from \"auto\"");
}

TEST_CASE("precision: an override settles an \"auto\" precision", "[config][precision]") {
  const Config config = read(with(R"("fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"})"), 1,
                             {"bf16.enabled=true"});
  REQUIRE(config.precision == Precision::bf16);
}

TEST_CASE("precision: bfloat16 is the older spelling of bf16, and both at once is an error",
          "[config][precision]") {
  REQUIRE(read(with(R"("bfloat16": {"enabled": true})")).precision == Precision::bf16);
  REQUIRE(error_of(with(R"("bf16": {"enabled": true}, "bfloat16": {"enabled": true})")) ==
          "bf16: given together with its alias bfloat16; keep one");
}

TEST_CASE("precision: loss-scale values out of range name the key and the rule",
          "[config][precision]") {
  REQUIRE(error_of(with(R"("fp16": {"enabled": true, "loss_scale": -1})")) ==
          "fp16.loss_scale: expected a number >= 0, got -1");
  REQUIRE(error_of(with(R"("fp16": {"enabled": true, "hysteresis": 0})")) ==
          "fp16.hysteresis: expected an integer >= 1, got 0");
  REQUIRE(error_of(with(R"("fp16": {"enabled": true, "min_loss_scale": 0})")) ==
          "fp16.min_loss_scale: expected a number > 0, got 0");
}

TEST_CASE("precision: communication and accumulation dtypes default to the compute dtype",
          "[config][precision]") {
  const Config config = read(with(R"("bf16": {"enabled": true},
                                     "data_types": {"grad_accum_dtype": "fp32"})"));
  REQUIRE(config.communication_data_type == DType::bf16);
  REQUIRE(config.grad_accum_dtype == DType::f32);
  REQUIRE(read(with(R"("communication_data_type": "bfp16")")).communication_data_type ==
          DType::bf16);
  REQUIRE(read(with(R"("communication_data_type": "FP32")")).communication_data_type == DType::f32);
  REQUIRE(error_of(with(R"("communication_data_type": "fp8")")) ==
          "communication_data_type: expected one of \"fp32\", \"fp16\", \"bf16\", got \"fp8\"");
}

TEST_CASE("precision: bf16 switches zero lacks are refused only when on", "[config][precision]") {
  REQUIRE(error_of(with(R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true})")) ==
          "bf16.bf16_master_weights_and_grads: bf16 master weights and gradients is not "
          "supported by zero (got true); remove it or disable it");
  const Config config = read(with(R"("bf16": {"enabled": true, "immediate_grad_update": true})"));
  REQUIRE(config.infos.size() >= 1);
}

TEST_CASE("precision: bf16.check_grad_overflow is on by default, as in DeepSpeed",
          "[config][precision]") {
  CHECK(read(with(R"("bf16": {"enabled": true})")).bf16_check_grad_overflow);
  CHECK(read(with(R"("bf16": {"enabled": true, "check_grad_overflow": true})"))
            .bf16_check_grad_overflow);
  const Config off = read(with(R"("bf16": {"enabled": true, "check_grad_overflow": false})"));
  CHECK_FALSE(off.bf16_check_grad_overflow);
  CHECK(resolved(off, "bf16.check_grad_overflow").value == false);
}

TEST_CASE("precision: bf16_optimizer_states keeps the moments in bf16, with bf16 training only",
          "[config][precision]") {
  REQUIRE(read(with(R"("bf16": {"enabled": true})")).optimizer_state_dtype == zero::DType::f32);
  REQUIRE(read(with(R"("bf16": {"enabled": true, "bf16_optimizer_states": true})"))
              .optimizer_state_dtype == zero::DType::bf16);
  REQUIRE_THAT(error_of(with(R"("bf16": {"enabled": false, "bf16_optimizer_states": true})")),
               Catch::Contains("need bf16 training"));
}

// ---------------------------------------------------------------------------- optimizer

TEST_CASE("optimizer: \"Adam\" means AdamW unless adam_w_mode is false", "[config][optimizer]") {
  REQUIRE(read(with(R"("optimizer": {"type": "Adam"})")).optimizer.type == OptimizerType::adamw);
  REQUIRE(read(with(R"("optimizer": {"type": "Adam", "params": {"adam_w_mode": false}})"))
              .optimizer.type == OptimizerType::adam);
}

TEST_CASE("optimizer: AdamW with adam_w_mode false stays AdamW and says so",
          "[config][optimizer]") {
  const Config config =
      read(with(R"("optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}})"));
  REQUIRE(config.optimizer.type == OptimizerType::adamw);
  REQUIRE(config.warnings.size() == 1);
  REQUIRE_THAT(config.warnings[0], Catch::Contains("always decays weights decoupled"));
}

TEST_CASE("optimizer: names are case-insensitive and params take DeepSpeed's defaults",
          "[config][optimizer]") {
  const Config adagrad = read(with(R"("optimizer": {"type": "adagrad"})"));
  REQUIRE(adagrad.optimizer.type == OptimizerType::adagrad);
  REQUIRE(adagrad.optimizer.lr == 1e-2);
  REQUIRE(adagrad.optimizer.eps == 1e-10);
  const Config lion =
      read(with(R"("optimizer": {"type": "LION", "params": {"betas": [0.95, 0.98]}})"));
  REQUIRE(lion.optimizer.type == OptimizerType::lion);
  REQUIRE(lion.optimizer.lr == 1e-3);
  REQUIRE(lion.optimizer.beta1 == 0.95);
  REQUIRE(lion.optimizer.beta2 == 0.98);
  const Config adam = read(with(R"("optimizer": {"type": "AdamW"})"));
  REQUIRE(adam.optimizer.eps == 1e-8);
  REQUIRE(adam.optimizer.weight_decay == 0.0);
  REQUIRE(adam.optimizer.bias_correction);
}

TEST_CASE("optimizer: no optimizer section means AdamW with DeepSpeed's defaults",
          "[config][optimizer]") {
  const Config config = read(with(""));
  REQUIRE(config.optimizer.type == OptimizerType::adamw);
  REQUIRE(config.optimizer.lr == 1e-3);
  REQUIRE(has_line(config.infos,
                   "no optimizer section: using AdamW with DeepSpeed's defaults (lr "
                   "1e-3); add \"optimizer\" to choose"));
}

TEST_CASE("optimizer: an unknown type suggests the nearest", "[config][optimizer]") {
  REQUIRE(error_of(with(R"("optimizer": {"type": "Lino"})")) ==
          "optimizer.type: unknown optimizer \"Lino\" (did you mean Lion?); zero offers Adam, "
          "AdamW, Adagrad, Lion, SGD");
}

TEST_CASE("optimizer: DeepSpeed optimizers zero lacks are refused by name", "[config][optimizer]") {
  REQUIRE(error_of(with(R"("optimizer": {"type": "OneBitAdam"})")) ==
          "optimizer.type: \"OneBitAdam\" is not supported by zero; use one of Adam, AdamW, "
          "Adagrad, Lion, SGD");
}

TEST_CASE("optimizer: a refused type says only that, not that its own params are unknown",
          "[config][optimizer]") {
  for (const char* type : {"Lamb", "OneBitAdam", "ZeroOneAdam"}) {
    INFO(type);
    REQUIRE(error_of(with(std::string(R"("optimizer": {"type": ")") + type +
                          R"(", "params": {"lr": 1e-3, "max_coeff": 0.3, "min_coeff": 0.01,
                              "freeze_step": 400, "cuda_aware": false, "var_freeze_step": 100}})")) ==
            std::string("optimizer.type: \"") + type +
                "\" is not supported by zero; use one of Adam, AdamW, Adagrad, Lion, SGD");
  }
}

TEST_CASE("optimizer: betas must be two numbers in between 0 and 1", "[config][optimizer]") {
  REQUIRE(error_of(with(R"("optimizer": {"type": "Adam", "params": {"betas": [0.9]}})")) ==
          "optimizer.params.betas: expected two numbers in [0, 1), like [0.9, 0.999], got [0.9]");
  REQUIRE(
      error_of(with(R"("optimizer": {"type": "Adam", "params": {"betas": [0.9, 1.0]}})")) ==
      "optimizer.params.betas: expected two numbers in [0, 1), like [0.9, 0.999], got [0.9,1.0]");
}

TEST_CASE("optimizer: max_grad_norm belongs in gradient_clipping", "[config][optimizer]") {
  REQUIRE(error_of(with(R"("optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}})")) ==
          "optimizer.params.max_grad_norm: not an optimizer parameter in DeepSpeed configs; use "
          "the top-level \"gradient_clipping\" instead");
}

TEST_CASE("optimizer: SGD with Nesterov needs momentum and no dampening", "[config][optimizer]") {
  const Config config = read(with(R"("optimizer": {"type": "SGD", "params": {"lr": 0.1,
                                     "momentum": 0.9, "nesterov": true}})"));
  REQUIRE(config.optimizer.nesterov);
  REQUIRE(config.optimizer.momentum == 0.9);
  REQUIRE(error_of(with(R"("optimizer": {"type": "SGD", "params": {"nesterov": true}})")) ==
          "optimizer.params.nesterov: Nesterov momentum needs momentum > 0 and dampening 0 (got "
          "momentum 0, dampening 0)");
}

TEST_CASE("optimizer: a misspelt parameter suggests the right one", "[config][optimizer]") {
  REQUIRE(error_of(with(R"("optimizer": {"type": "AdamW", "params": {"weight_decy": 0.1}})")) ==
          "optimizer.params.weight_decy: unknown key; did you mean weight_decay?");
}

TEST_CASE("optimizer: \"auto\" parameters take an override or the default", "[config][optimizer]") {
  const std::string text = with(R"("optimizer": {"type": "AdamW", "params": {"lr": "auto",
                                  "weight_decay": "auto"}})");
  const Config overridden = read(text, 1, {"optimizer.params.lr=3e-4"});
  REQUIRE(overridden.optimizer.lr == 3e-4);
  REQUIRE(overridden.optimizer.weight_decay == 0.0);
  REQUIRE(read(text).optimizer.lr == 1e-3);
}

TEST_CASE("optimizer: AMSGrad is refused when on", "[config][optimizer]") {
  REQUIRE(error_of(with(R"("optimizer": {"type": "Adam", "params": {"amsgrad": true}})")) ==
          "optimizer.params.amsgrad: AMSGrad is not supported by zero (got true); remove it or "
          "disable it");
  REQUIRE_NOTHROW(read(with(R"("optimizer": {"type": "Adam", "params": {"amsgrad": false}})")));
}

// ---------------------------------------------------------------------------- scheduler

TEST_CASE("scheduler: WarmupDecayLR without total_num_steps is a config error",
          "[config][scheduler]") {
  REQUIRE(error_of(with(R"("scheduler": {"type": "WarmupDecayLR", "params": {}})")) ==
          "scheduler.params.total_num_steps: required; supply it with zero-train --steps, --set "
          "scheduler.params.total_num_steps=VALUE, or a C API override of "
          "\"scheduler.params.total_num_steps\"");
}

TEST_CASE("scheduler: an \"auto\" required parameter names what would supply it",
          "[config][scheduler]") {
  const std::string text =
      with(R"("scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto"}})");
  REQUIRE_THAT(error_of(text), Catch::StartsWith("scheduler.params.total_num_steps: is \"auto\" "
                                                 "and nothing supplies it; supply it with "
                                                 "zero-train --steps"));
  REQUIRE(read(text, 1, {"scheduler.params.total_num_steps=500"}).scheduler.total_num_steps == 500);
}

TEST_CASE("scheduler: WarmupLR warms up to the optimizer's lr unless told otherwise",
          "[config][scheduler]") {
  const Config config = read(with(R"("optimizer": {"type": "AdamW", "params": {"lr": 2e-4}},
                                     "scheduler": {"type": "WarmupLR"})"));
  REQUIRE(config.scheduler.warmup_max_lr == 2e-4);
  REQUIRE(resolved(config, "scheduler.params.warmup_max_lr").note == "the optimizer's lr");
  REQUIRE(config.scheduler.warmup_type == WarmupType::log);
}

TEST_CASE("scheduler: OneCycle needs its two lrs and mirrors the first step size",
          "[config][scheduler]") {
  REQUIRE_THAT(
      error_of(with(R"("scheduler": {"type": "OneCycle", "params": {"cycle_max_lr": 0.1}})")),
      Catch::StartsWith("scheduler.params.cycle_min_lr: required;"));
  const Config config =
      read(with(R"("scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.01,
                                     "cycle_max_lr": 0.1, "cycle_first_step_size": 300}})"));
  REQUIRE(config.scheduler.cycle_second_step_size == 300);
  REQUIRE(config.scheduler.cycle_momentum);
}

TEST_CASE("scheduler: OneCycle turns momentum cycling off for optimizers without betas",
          "[config][scheduler]") {
  const Config config = read(with(R"("optimizer": {"type": "SGD", "params": {"lr": 0.1}},
      "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1}})"));
  REQUIRE_FALSE(config.scheduler.cycle_momentum);
  REQUIRE(has_line(config.warnings,
                   "scheduler.params.cycle_momentum: SGD has no betas to cycle; "
                   "momentum cycling is off (as in DeepSpeed)"));
}

TEST_CASE("scheduler: PyTorch schedulers are refused by name, typos get a suggestion",
          "[config][scheduler]") {
  REQUIRE(error_of(with(R"("scheduler": {"type": "StepLR"})")) ==
          "scheduler.type: PyTorch's \"StepLR\" is not supported by zero; use one of WarmupLR, "
          "WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest");
  REQUIRE(error_of(with(R"("scheduler": {"type": "warmuplr"})")) ==
          "scheduler.type: unknown scheduler \"warmuplr\" (did you mean WarmupLR?); zero offers "
          "WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest");
}

TEST_CASE("scheduler: warmup_type is log or linear", "[config][scheduler]") {
  REQUIRE(
      error_of(with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}})")) ==
      "scheduler.params.warmup_type: expected one of \"log\", \"linear\", got \"cosine\"");
}

TEST_CASE("scheduler: WarmupCosineLR and LRRangeTest read their parameters",
          "[config][scheduler]") {
  const Config cosine = read(with(R"("scheduler": {"type": "WarmupCosineLR", "params": {
      "total_num_steps": 100, "warmup_num_steps": 10, "cos_min_ratio": 0.1}})"));
  REQUIRE(cosine.scheduler.total_num_steps == 100);
  REQUIRE(cosine.scheduler.cos_min_ratio == 0.1);
  REQUIRE(cosine.scheduler.warmup_min_ratio == 0.0);
  const Config range = read(with(R"("scheduler": {"type": "LRRangeTest", "params": {
      "lr_range_test_staircase": true}})"));
  REQUIRE(range.scheduler.lr_range_test_staircase);
  REQUIRE(range.scheduler.lr_range_test_step_size == 2000);
}

// ---------------------------------------------------------------------------- zero_optimization

TEST_CASE("zero: a misspelt key names its path and the nearest known key", "[config][zero]") {
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 2, "reduce_bucket_sise": 5e8})")) ==
          "zero_optimization.reduce_bucket_sise: unknown key; did you mean reduce_bucket_size?");
}

TEST_CASE("zero: a key in the wrong section points to where it belongs", "[config][zero]") {
  // At the top level, as DeepSpeed ignores it: a warning.
  const Config config = read(with(R"("reduce_bucket_size": 5e8)"));
  REQUIRE(has_line(config.warnings,
                   "reduce_bucket_size: unknown key here; did you mean "
                   "zero_optimization.reduce_bucket_size?; ignored, as DeepSpeed ignores it"));
}

TEST_CASE("zero: a key nothing resembles points to zero-config keys", "[config][zero]") {
  const Config config = read(with(R"("flux_capacitor": 1)"));
  REQUIRE(has_line(config.warnings,
                   "flux_capacitor: unknown key (`zero-config keys` lists every key zero "
                   "knows); ignored, as DeepSpeed ignores it"));
}

TEST_CASE("unknown keys: top-level ones real configs carry are warnings naming the nearest key",
          "[config]") {
  // From public projects' DeepSpeed configs (accelerate, LLaMA-Factory, FastChat, ...).
  const Config config =
      read(with(R"("cuda_visible_devices": "0,1", "monitor_config": {"enabled": false},
      "comms_config": {"verbose": false}, "_comment": "tuned for 8 GPUs", "log": {"level": "info"},
      "gradient_clippin": 1.0)"));
  for (const char* key :
       {"cuda_visible_devices", "monitor_config", "comms_config", "_comment", "log"}) {
    INFO(key);
    bool warned = false;
    for (const std::string& line : config.warnings) {
      warned = warned || (line.rfind(std::string(key) + ": unknown key", 0) == 0 &&
                          line.find("ignored, as DeepSpeed ignores it") != std::string::npos);
    }
    CHECK(warned);
  }
  CHECK(has_line(config.warnings,
                 "gradient_clippin: unknown key; did you mean gradient_clipping?; "
                 "ignored, as DeepSpeed ignores it"));
  // Inside the sections DeepSpeed validates strictly they stay errors.
  for (
      const auto& [section, where] :
      {std::pair{R"("fp16": {"enabled": true, "loss_scal": 0})", "fp16.loss_scal"},
       std::pair{R"("bf16": {"enabled": true, "stray": 1})", "bf16.stray"},
       std::pair{
           R"("zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin": true}})",
           "zero_optimization.offload_param.pin"},
       std::pair{
           R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio1": 1}})",
           "zero_optimization.offload_optimizer.ratio1"},
       std::pair{R"("optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "momentum": 0.9}})",
                 "optimizer.params.momentum"}}) {
    INFO(where);
    CHECK_THAT(error_of(with(section)), Catch::StartsWith(std::string(where) + ": unknown key"));
  }
}

TEST_CASE("zero: the stage is 0 to 3 and must be an integer", "[config][zero]") {
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 4})")) ==
          "zero_optimization.stage: expected an integer from 0 to 3, got 4");
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": "two"})")) ==
          "zero_optimization.stage: expected an integer from 0 to 3, got \"two\"");
}

TEST_CASE("zero: sizes written as 5e8 are integers, fractions are not", "[config][zero]") {
  REQUIRE(read(with(R"("zero_optimization": {"allgather_bucket_size": 2e8})"))
              .zero.allgather_bucket_size == 200'000'000);
  REQUIRE(error_of(with(R"("zero_optimization": {"reduce_bucket_size": 1.5})")) ==
          "zero_optimization.reduce_bucket_size: expected an integer >= 0, got 1.5");
  REQUIRE(error_of(with(R"("zero_optimization": {"sub_group_size": -1})")) ==
          "zero_optimization.sub_group_size: expected an integer >= 0, got -1");
}

TEST_CASE("zero: overlap_comm defaults to true at stage 3 only", "[config][zero]") {
  REQUIRE(read(with(R"("zero_optimization": {"stage": 3})")).zero.overlap_comm);
  REQUIRE_FALSE(read(with(R"("zero_optimization": {"stage": 2})")).zero.overlap_comm);
  REQUIRE_FALSE(
      read(with(R"("zero_optimization": {"stage": 3, "overlap_comm": false})")).zero.overlap_comm);
}

TEST_CASE("zero: \"zero_optimization\": true is stage 1 with DeepSpeed's deprecation warning",
          "[config][zero]") {
  const Config config = read(with(R"("zero_optimization": true)"));
  REQUIRE(config.zero.stage == 1);
  REQUIRE(has_line(config.warnings,
                   "\"zero_optimization\": true is deprecated; write "
                   "\"zero_optimization\": {\"stage\": 1}"));
  REQUIRE(read(with(R"("zero_optimization": false)")).zero.stage == 0);
}

TEST_CASE("zero: stage-3 keys are accepted with and without the stage3_ prefix", "[config][zero]") {
  const Config config = read(with(R"("zero_optimization": {"stage": 3, "prefetch_bucket_size": 1234,
                                     "stage3_max_live_parameters": 99})"));
  REQUIRE(config.zero.prefetch_bucket_size == 1234);
  REQUIRE(config.zero.max_live_parameters == 99);
  REQUIRE(error_of(with(R"("zero_optimization": {"prefetch_bucket_size": 1,
                           "stage3_prefetch_bucket_size": 2})")) ==
          "zero_optimization.stage3_prefetch_bucket_size: given together with its alias "
          "zero_optimization.prefetch_bucket_size; keep one");
}

TEST_CASE("zero: \"auto\" sizes take DeepSpeed's defaults", "[config][zero]") {
  const Config config = read(with(R"("zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"})"));
  REQUIRE(config.zero.reduce_bucket_size == 500'000'000);
  REQUIRE(config.zero.prefetch_bucket_size == 50'000'000);
  REQUIRE(config.zero.param_persistence_threshold == 100'000);
  REQUIRE(resolved(config, "zero_optimization.reduce_bucket_size").note == "from \"auto\"");
}

TEST_CASE("zero: cpu_offload maps to offload_optimizer with a warning", "[config][zero]") {
  const Config config = read(with(R"("zero_optimization": {"stage": 2, "cpu_offload": true})"));
  REQUIRE(config.zero.offload_optimizer.device == OffloadDevice::cpu);
  REQUIRE(has_line(config.warnings,
                   "zero_optimization.cpu_offload is deprecated; use "
                   "zero_optimization.offload_optimizer.device = \"cpu\" (mapped)"));
}

TEST_CASE("zero: a deprecated key with its replacement is refused", "[config][zero]") {
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 2, "cpu_offload": true,
                           "offload_optimizer": {"device": "cpu"}})")) ==
          "zero_optimization.cpu_offload is deprecated and cannot be given together with "
          "zero_optimization.offload_optimizer; keep zero_optimization.offload_optimizer");
}

TEST_CASE("zero: cpu_offload_param and cpu_offload_use_pin_memory map with warnings",
          "[config][zero]") {
  const Config config = read(with(R"("zero_optimization": {"stage": 3, "cpu_offload_param": true,
                                     "cpu_offload_use_pin_memory": true})"));
  REQUIRE(config.zero.offload_param.device == OffloadDevice::cpu);
  REQUIRE(config.zero.offload_param.pin_memory == true);
  REQUIRE(config.zero.offload_optimizer.pin_memory == true);
  REQUIRE(config.warnings.size() == 2);
}

TEST_CASE("zero: the fp16 spelling of the 16-bit save key maps with a warning", "[config][zero]") {
  const Config config = read(with(R"("zero_optimization": {"stage": 3,
      "stage3_gather_fp16_weights_on_model_save": true})"));
  REQUIRE(config.zero.gather_16bit_weights_on_model_save);
  REQUIRE(has_line(config.warnings,
                   "zero_optimization.stage3_gather_fp16_weights_on_model_save is deprecated; use "
                   "stage3_gather_16bit_weights_on_model_save (mapped)"));
}

TEST_CASE("zero: nvme offload needs nvme_path", "[config][zero][offload]") {
  REQUIRE(error_of(with(
              R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}})")) ==
          "zero_optimization.offload_optimizer.nvme_path: required when device is \"nvme\" (a "
          "directory on a fast local disk for the optimizer's swap files)");
  REQUIRE(
      error_of(with(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}})")) ==
      "zero_optimization.offload_param.nvme_path: required when device is \"nvme\" (a "
      "directory on a fast local disk for the parameters' swap files)");
}

TEST_CASE("zero: optimizer state on NVMe needs 3 swap buffers, at the config's reading",
          "[config][zero][offload]") {
  auto nvme = [](int buffers, const char* device) {
    return with(fmt::format(R"("zero_optimization": {{"stage": 2, "offload_optimizer":
        {{"device": "{}", "nvme_path": "/nvme", "buffer_count": {}}}}})",
                            device, buffers));
  };
  REQUIRE(error_of(nvme(2, "nvme")) ==
          "zero_optimization.offload_optimizer.buffer_count is 2: swapping optimizer state to "
          "NVMe needs at least 3 buffers (one read ahead, one stepping, one writing); set 3 or "
          "more, and lower sub_group_size to make each buffer smaller");
  REQUIRE(read(nvme(3, "nvme")).zero.offload_optimizer.buffer_count == 3);
  // Without NVMe nothing is swapped, and the count is not used.
  REQUIRE(read(nvme(2, "cpu")).zero.offload_optimizer.buffer_count == 2);
}

TEST_CASE("zero: offload device is none, cpu or nvme", "[config][zero][offload]") {
  REQUIRE(error_of(with(
              R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "gpu"}})")) ==
          "zero_optimization.offload_optimizer.device: expected one of \"none\", \"cpu\", "
          "\"nvme\", got \"gpu\"");
}

TEST_CASE("zero: optimizer offload needs stage 1 or above", "[config][zero][offload]") {
  REQUIRE(error_of(with(
              R"("zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}})")) ==
          "zero_optimization.offload_optimizer.device is \"cpu\" but the stage is 0; optimizer "
          "offload needs zero_optimization.stage 1, 2 or 3");
}

TEST_CASE("zero: parameter offload below stage 3 is ignored with a warning, as in DeepSpeed",
          "[config][zero][offload]") {
  const Config config = read(with(R"("zero_optimization": {"stage": 2,
      "offload_param": {"device": "cpu"}})"));
  REQUIRE(config.zero.offload_param.device == OffloadDevice::none);
  REQUIRE(has_line(config.warnings,
                   "zero_optimization.offload_param applies at stage 3 only; "
                   "ignored at stage 2 (as DeepSpeed does)"));
}

TEST_CASE("zero: partial optimizer offload is refused, naming super_offload",
          "[config][zero][offload]") {
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "ratio": 0.5}})")) ==
          "zero_optimization.offload_optimizer.ratio: partial optimizer offload (ZeRO-Offload++'s "
          "ratio < 1, got 0.5) is not supported by zero: every step group is stepped where the "
          "optimizer is offloaded. Remove ratio; to hide the offloaded step behind backward, set "
          "offload_optimizer.super_offload to true, which gives the same numbers as the step "
          "without offload");
  REQUIRE(read(with(R"("zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "ratio": 1}})"))
              .zero.offload_optimizer.device == OffloadDevice::cpu);
}

TEST_CASE("zero: super_offload and cpuadam_cores_perc as DeepSpeed spells them",
          "[config][zero][offload]") {
  // Unset (absent, null or "auto"): off until the engine decides at init.
  for (const char* unset : {"", R"(, "super_offload": null)", R"(, "super_offload": "auto")"}) {
    INFO("unset as '" << unset << "'");
    const Config off = read(with(std::string(R"("zero_optimization": {"stage": 2,
        "offload_optimizer": {"device": "cpu")") +
                                 unset + "}}"));
    REQUIRE_FALSE(off.zero.offload_optimizer.super_offload);
    REQUIRE(off.zero.offload_optimizer.super_offload_auto);
    REQUIRE(off.zero.offload_optimizer.cpuadam_cores_perc == 0.8);
  }
  const Config none = read(with(R"("zero_optimization": {"stage": 2})"));
  REQUIRE_FALSE(none.zero.offload_optimizer.super_offload_auto);  // nothing offloaded
  const Config asked_off = read(with(R"("zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "super_offload": false}})"));
  REQUIRE_FALSE(asked_off.zero.offload_optimizer.super_offload);
  REQUIRE_FALSE(asked_off.zero.offload_optimizer.super_offload_auto);
  const Config on = read(with(R"("zero_optimization": {"stage": 1,
      "offload_optimizer": {"device": "cpu", "super_offload": true, "cpuadam_cores_perc": 0.5}})"));
  REQUIRE(on.zero.offload_optimizer.super_offload);
  REQUIRE_FALSE(on.zero.offload_optimizer.super_offload_auto);
  REQUIRE(on.zero.offload_optimizer.cpuadam_cores_perc == 0.5);
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "super_offload": true, "cpuadam_cores_perc": 1.5}})")) ==
          "zero_optimization.offload_optimizer.cpuadam_cores_perc: expected a number >= 0 and <= "
          "1, got 1.5");
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "super_offload": true, "cpuadam_cores_perc": 0}})"))
              .starts_with("zero_optimization.offload_optimizer.cpuadam_cores_perc is 0"));
  const Config nvme = read(with(R"("zero_optimization": {"stage": 3, "offload_optimizer":
      {"device": "nvme", "nvme_path": "/tmp", "super_offload": true}})"));
  REQUIRE(nvme.zero.offload_optimizer.super_offload);
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 3,
      "offload_optimizer": {"super_offload": true}})")) ==
          "zero_optimization.offload_optimizer.super_offload needs the optimizer offloaded: set "
          "offload_optimizer.device to \"cpu\" or \"nvme\", or remove super_offload");
}

TEST_CASE(
    "zero: accumulate_on_device, zero's own key, is off by default and needs an offloaded "
    "optimizer",
    "[config][zero][offload]") {
  REQUIRE_FALSE(read(with(R"("zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu"}})"))
                    .zero.offload_optimizer.accumulate_on_device);
  REQUIRE(read(with(R"("zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "accumulate_on_device": true}})"))
              .zero.offload_optimizer.accumulate_on_device);
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 3,
      "offload_optimizer": {"accumulate_on_device": true}})")) ==
          "zero_optimization.offload_optimizer.accumulate_on_device sums an accumulation "
          "window's offloaded gradients on the device: it needs the optimizer offloaded; set "
          "offload_optimizer.device to \"cpu\" or \"nvme\", or remove accumulate_on_device");
}

TEST_CASE("zero: a ZenFlow section is refused by name, with the exact alternative",
          "[config][zero][offload]") {
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 2,
      "zenflow": {"topk_ratio": 0.1}})")) ==
          "zero_optimization.zenflow: ZenFlow (important gradient columns stepped on the device, "
          "the rest on the CPU every few steps: an approximation) is not supported by zero (got "
          "{\"topk_ratio\":0.1}); remove it or disable it (offload_optimizer.super_offload "
          "overlaps the offloaded step with backward and stays exact)");
}

TEST_CASE("zero: hpZ's secondary partition is stage 3's, within groups that divide the world",
          "[config][zero][hybrid]") {
  REQUIRE(read(with(R"("zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2})"), 8)
              .zero.hpz_size == 2);
  const Config below =
      read(with(R"("zero_optimization": {"stage": 2, "zero_hpz_partition_size": 2})"), 8);
  REQUIRE(below.zero.hpz_size == 0);
  REQUIRE(has_line(below.infos,
                   "zero_optimization.zero_hpz_partition_size: no effect at stage "
                   "2: its secondary partition serves stage 3's gathers"));
  const Config whole =
      read(with(R"("zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8})"), 8);
  REQUIRE(whole.zero.hpz_size == 0);
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 3, "zero_hpz_partition_size": 3})"), 8) ==
          "zero_optimization.zero_hpz_partition_size = 3: secondary groups of 3 ranks must "
          "divide the world of 8 ranks into equal groups; use one of 1, 2, 4, 8");
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2,
                                                  "mics_shard_size": 4})"),
                   8)
              .starts_with("zero_optimization.zero_hpz_partition_size = 2 and hybrid sharding "
                           "(mics_shard_size or hybrid_shard) are both given; keep one"));
}

TEST_CASE("zero: ZeRO++ quantizes stage 3's gathers and the reduce-scatter where they exist",
          "[config][zero]") {
  const Config both = read(with(R"("zero_optimization": {"stage": 3,
      "zero_quantized_weights": true, "zero_quantized_gradients": true})"));
  REQUIRE(both.zero.quantized_weights);
  REQUIRE(both.zero.quantized_gradients);
  const Config off = read(with(R"("zero_optimization": {"stage": 3})"));
  REQUIRE_FALSE(off.zero.quantized_weights);
  REQUIRE_FALSE(off.zero.quantized_gradients);
  // Gradients from stage 1 on; weights at stage 3 only.
  const Config stage2 = read(with(R"("zero_optimization": {"stage": 2,
      "zero_quantized_weights": true, "zero_quantized_gradients": true})"));
  REQUIRE(stage2.zero.quantized_gradients);
  REQUIRE_FALSE(stage2.zero.quantized_weights);
  REQUIRE(has_line(stage2.infos,
                   "zero_optimization.zero_quantized_weights: no effect at stage 2: it "
                   "quantizes stage 3's parameter gathers"));
  const Config stage0 =
      read(with(R"("zero_optimization": {"stage": 0, "zero_quantized_gradients": true})"));
  REQUIRE_FALSE(stage0.zero.quantized_gradients);
  REQUIRE(has_line(stage0.infos,
                   "zero_optimization.zero_quantized_gradients: no effect at stage 0: it "
                   "quantizes the gradients' reduce-scatter, and stage 0 all-reduces them"));
  const Config all_reduce = read(with(R"("zero_optimization": {"stage": 2,
      "reduce_scatter": false, "zero_quantized_gradients": true})"));
  REQUIRE_FALSE(all_reduce.zero.quantized_gradients);
  REQUIRE(has_line(all_reduce.infos,
                   "zero_optimization.zero_quantized_gradients: no effect with "
                   "zero_optimization.reduce_scatter false: it quantizes the reduce-scatter, and "
                   "the gradients are all-reduced exactly"));
  // The error check measures what is quantized, and says so when nothing is.
  REQUIRE(read(with(R"("zero_optimization": {"stage": 2, "zero_quantized_gradients": true,
      "zero_quantized_error_check": true})"))
              .zero.quantized_error_check);
  const Config unchecked =
      read(with(R"("zero_optimization": {"stage": 2, "zero_quantized_error_check": true})"));
  REQUIRE_FALSE(unchecked.zero.quantized_error_check);
  REQUIRE(has_line(unchecked.infos,
                   "zero_optimization.zero_quantized_error_check: no effect: nothing is "
                   "quantized"));
  // ZeRO++'s int8 storage of frozen weights is another matter, still refused.
  REQUIRE(error_of(with(R"("zero_optimization": {"stage": 3,
      "zero_quantized_nontrainable_weights": true})")) ==
          "zero_optimization.zero_quantized_nontrainable_weights: ZeRO++ quantized non-trainable "
          "weights is not supported by zero (got true); remove it or disable it");
}

TEST_CASE("zero: hybrid sharding takes MiCS's group size or a node's ranks, dividing the world",
          "[config][zero][hybrid]") {
  const auto at = [](const std::string& zero, int world, int per_node = 0) {
    ReadOptions options;
    options.world_size = world;
    options.ranks_per_node = per_node;
    return read_config_text(with(R"("zero_optimization": )" + zero), options);
  };
  const auto refused = [&](const std::string& zero, int world, int per_node = 0) {
    try {
      at(zero, world, per_node);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    FAIL("expected a config error for " << zero);
    return std::string();
  };
  REQUIRE(at(R"({"stage": 3, "mics_shard_size": 2})", 8).zero.shard_size == 2);
  // The whole world is one group: flat.
  REQUIRE(at(R"({"stage": 2, "mics_shard_size": 8})", 8).zero.shard_size == 0);
  REQUIRE(at(R"({"stage": 3, "mics_shard_size": -1})", 8).zero.shard_size == 0);
  const Config node = at(R"({"stage": 3, "hybrid_shard": true})", 8, 4);
  REQUIRE(node.zero.shard_size == 4);
  REQUIRE(node.zero.hybrid_shard);
  REQUIRE(resolved(node, "zero_optimization.mics_shard_size").value == 4);
  const Config stage0 = at(R"({"stage": 0, "mics_shard_size": 2})", 8);
  REQUIRE(stage0.zero.shard_size == 0);
  REQUIRE(has_line(stage0.infos,
                   "zero_optimization.mics_shard_size: no effect at stage 0, where nothing is "
                   "partitioned"));
  REQUIRE(refused(R"({"stage": 3, "mics_shard_size": 3})", 8) ==
          "zero_optimization.mics_shard_size = 3: shard groups of 3 ranks must divide the world "
          "of 8 ranks into equal groups; use one of 1, 2, 4, 8");
  REQUIRE(refused(R"({"stage": 3, "mics_shard_size": 16})", 8) ==
          "zero_optimization.mics_shard_size = 16: shard groups of 16 ranks must divide the "
          "world of 8 ranks into equal groups; use one of 1, 2, 4, 8");
  REQUIRE(refused(R"({"stage": 3, "hybrid_shard": true, "mics_shard_size": 2})", 8, 4) ==
          "zero_optimization.hybrid_shard and zero_optimization.mics_shard_size are both given; "
          "keep one: hybrid_shard makes the shard group a node's ranks, mics_shard_size gives its "
          "size");
  REQUIRE(refused(R"({"stage": 3, "hybrid_shard": true})", 8) ==
          "zero_optimization.hybrid_shard: zero cannot tell here how many ranks share a node "
          "(start the job with zero-run, mpirun or srun, or give zero-mem --ranks-per-node); or "
          "give the shard group's size with mics_shard_size");
  REQUIRE(refused(R"({"stage": 3, "hybrid_shard": true})", 4, 8) ==
          "zero_optimization.hybrid_shard (a node's 8 ranks): shard groups of 8 ranks must "
          "divide the world of 4 ranks into equal groups; use one of 1, 2, 4");
  // The hierarchical gather changes only the gathers' route.
  REQUIRE(has_line(at(R"({"stage": 3, "mics_shard_size": 2,
                          "mics_hierarchical_params_gather": true})",
                      8)
                       .infos,
                   "zero_optimization.mics_hierarchical_params_gather: accepted, no effect "
                   "here: a shard group's gathers are one all-gather over the group's ranks"));
}

TEST_CASE("zero: a section given as a non-object is an error, null means absent",
          "[config][zero]") {
  REQUIRE(error_of(with(R"("zero_optimization": {"offload_optimizer": [1]})")) ==
          "zero_optimization.offload_optimizer: expected an object {...}, got [1]");
  REQUIRE(read(with(R"("zero_optimization": {"offload_optimizer": null})"))
              .zero.offload_optimizer.device == OffloadDevice::none);
}

TEST_CASE("zero: booleans accept true/false, 0/1 and \"true\"/\"false\" as DeepSpeed does",
          "[config][zero]") {
  const Config config = read(with(R"("zero_optimization": {"reduce_scatter": 0,
                                     "ignore_unused_parameters": "false", "overlap_comm": "TRUE"})"));
  REQUIRE_FALSE(config.zero.reduce_scatter);
  REQUIRE_FALSE(config.zero.ignore_unused_parameters);
  REQUIRE(config.zero.overlap_comm);
  REQUIRE(error_of(with(R"("zero_optimization": {"reduce_scatter": "maybe"})")) ==
          "zero_optimization.reduce_scatter: expected true or false, got \"maybe\"");
}

// ---------------------------------------------------------------------------- other sections

TEST_CASE("aio: DeepSpeed's defaults, thread_count as the old name, GDS refused", "[config][aio]") {
  const Config defaults = read(with(""));
  REQUIRE(defaults.aio.block_size == 1'048'576);
  REQUIRE(defaults.aio.queue_depth == 8);
  REQUIRE(defaults.aio.intra_op_parallelism == 1);
  REQUIRE_THAT(error_of(with(R"("aio": {"block_size": 6000})")),
               Catch::Contains("not a multiple of 4096"));
  REQUIRE(!error_of(with(R"("aio": {"queue_depth": 2048})")).empty());
  REQUIRE(read(with(R"("aio": {"single_submit": true})")).infos.size() >= 1);
  REQUIRE(read(with(R"("aio": {"thread_count": 4})")).aio.intra_op_parallelism == 4);
  REQUIRE(error_of(with(R"("aio": {"use_gds": true})")) ==
          "aio.use_gds: GPUDirect Storage (use_gds) is not supported by zero (got true); remove it "
          "or disable it");
}

TEST_CASE("checkpoint: tag_validation is case-insensitive", "[config][checkpoint]") {
  REQUIRE(read(with(R"("checkpoint": {"tag_validation": "FAIL"})")).checkpoint.tag_validation ==
          TagValidation::fail);
  REQUIRE(
      error_of(with(R"("checkpoint": {"tag_validation": "strict"})")) ==
      "checkpoint.tag_validation: expected one of \"Ignore\", \"Warn\", \"Fail\", got \"strict\"");
}

TEST_CASE("runtime: clipping and printing are range-checked", "[config][runtime]") {
  REQUIRE(error_of(with(R"("gradient_clipping": -1)")) ==
          "gradient_clipping: expected a number >= 0, got -1");
  REQUIRE(error_of(with(R"("steps_per_print": 0)")) ==
          "steps_per_print: expected an integer >= 1, got 0");
  REQUIRE(read(with(R"("steps_per_print": null)")).steps_per_print == 10);
}

TEST_CASE("activation checkpointing: keys are read for the model", "[config][runtime]") {
  const Config config = read(with(R"("activation_checkpointing": {"cpu_checkpointing": true,
                                     "number_checkpoints": 4, "partition_activations": true})"));
  REQUIRE(config.activation_checkpointing.cpu_checkpointing);
  REQUIRE(config.activation_checkpointing.number_checkpoints == 4);
  REQUIRE_THAT(config.infos.back(), Catch::Contains("partition_activations: no effect here"));
}

TEST_CASE("features: enabled switches of features zero lacks are refused", "[config][features]") {
  REQUIRE(error_of(with(R"("tensorboard": {"enabled": true, "output_path": "/tmp"})")) ==
          "tensorboard: TensorBoard logging (zero-train --metrics writes JSON lines) is not "
          "supported by zero (got {\"enabled\":true,\"output_path\":\"/tmp\"}); remove it or "
          "disable it");
  REQUIRE_THAT(error_of(with(R"("compression_training": {"weight_quantization":
                             {"shared_parameters": {"enabled": true}}})")),
               Catch::StartsWith("compression_training: compression training is not supported"));
  REQUIRE_THAT(error_of(with(R"("pipeline": {"stages": 2})")),
               Catch::StartsWith("pipeline: pipeline parallelism is not supported"));
  REQUIRE_THAT(error_of(with(R"("amp": {"enabled": true, "opt_level": "O1"})")),
               Catch::StartsWith("amp: Apex AMP (use fp16 or bf16) is not supported"));
}

TEST_CASE("features: disabled switches are accepted with a note", "[config][features]") {
  const Config config = read(with(R"("wandb": {"enabled": false, "project": "x"},
                                     "flops_profiler": {"enabled": false},
                                     "pipeline": {"pipe_partitioned": true}, "dump_state": true)"));
  REQUIRE(has_line(config.infos,
                   "wandb: accepted because it is disabled (Weights & Biases "
                   "logging (zero-train --metrics writes JSON lines) is not supported)"));
  REQUIRE(has_line(config.infos,
                   "dump_state: accepted, no effect here: zero-config check prints "
                   "the resolved config"));
}

TEST_CASE("errors: every problem of a config is reported at once", "[config][errors]") {
  const std::string message = error_of(R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 5, "reduce_bucket_sise": 1},
      "optimizer": {"type": "Adam", "params": {"betas": 0.9}},
      "gradient_clipping": "big"})");
  const auto lines = std::count(message.begin(), message.end(), '\n') + 1;
  REQUIRE(lines == 4);
  REQUIRE_THAT(
      message,
      Catch::Contains("zero_optimization.stage: expected an integer from 0 to 3, got 5") &&
          Catch::Contains("optimizer.params.betas: expected two numbers") &&
          Catch::Contains("gradient_clipping: expected a number >= 0, got \"big\"") &&
          Catch::Contains("reduce_bucket_sise: unknown key; did you mean reduce_bucket_size?"));
}

TEST_CASE("keys: every key is declared once with a class, and the classes all occur",
          "[config][keys]") {
  const Config config = read(with(R"("optimizer": {"type": "SGD"})"));
  std::set<std::string> paths;
  std::set<KeyClass> classes;
  for (const auto& key : config.known) {
    REQUIRE(paths.insert(key.path).second);
    classes.insert(key.key_class);
    if (key.key_class == KeyClass::no_effect || key.key_class == KeyClass::unsupported) {
      REQUIRE_FALSE(key.note.empty());
    }
  }
  REQUIRE(classes.size() == 4);
  REQUIRE(paths.count("zero_optimization.offload_optimizer.pipeline_read") == 1);
  REQUIRE(paths.count("optimizer.params.nesterov") == 1);
}

TEST_CASE("edit distance counts transpositions as one edit", "[config][keys]") {
  REQUIRE(edit_distance("reduce_bucket_sise", "reduce_bucket_size") == 1);
  REQUIRE(edit_distance("satge", "stage") == 1);
  REQUIRE(edit_distance("", "abc") == 3);
}

}  // namespace zero::config

namespace zero::config {
using namespace zero::config::test;

TEST_CASE("robustness: a number too large for a double is malformed JSON with its position",
          "[config][json]") {
  REQUIRE(error_of("{\n \"train_batch_size\": 1e400}") ==
          "<string>:2:22: malformed JSON: number overflow parsing '1e400'");
  REQUIRE_THROWS_AS(parse_override("optimizer.params.lr=1e400"), Error);
}

TEST_CASE("robustness: batch products that overflow are refused, not wrapped", "[config][batch]") {
  REQUIRE(error_of(R"({"train_micro_batch_size_per_gpu": 4611686018427387904,
                       "gradient_accumulation_steps": 4})") ==
          "train_micro_batch_size_per_gpu * gradient_accumulation_steps * world size overflows: "
          "4611686018427387904 * 4 * 1; use realistic batch sizes");
  REQUIRE_THAT(error_of(R"({"train_batch_size": 18446744073709551615})"),
               Catch::Contains("expected an integer >= 1"));
}

TEST_CASE("robustness: gradient_allreduce_op is mean or sum, any case, sum is refused",
          "[config][features]") {
  REQUIRE(error_of(R"({"train_batch_size": 8, "gradient_allreduce_op": "SUM"})") ==
          "gradient_allreduce_op: summing instead of averaging gradients is not supported by zero "
          "(got \"sum\"); remove it or disable it");
  REQUIRE(error_of(R"({"train_batch_size": 8, "gradient_allreduce_op": "max"})") ==
          "gradient_allreduce_op: expected one of \"mean\", \"sum\", got \"max\"");
  REQUIRE_NOTHROW(read(R"({"train_batch_size": 8, "gradient_allreduce_op": "Mean"})"));
}

TEST_CASE("robustness: switches of unsupported features are type-checked, and \"auto\" is off",
          "[config][features]") {
  REQUIRE(error_of(R"({"train_batch_size": 8, "tensorboard": true})") ==
          "tensorboard: expected an object {\"enabled\": ...}, got true");
  REQUIRE(error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1,
                       "offload_optimizer": {"device": "cpu", "ratio": 2}}})") ==
          "zero_optimization.offload_optimizer.ratio: expected a number >= 0 and <= 1, got 2");
  REQUIRE(
      error_of(
          R"({"train_batch_size": 8, "zero_optimization": {"contiguous_gradients": "banana"}})") ==
      "zero_optimization.contiguous_gradients: expected true or false, got \"banana\"");
  REQUIRE_NOTHROW(read(R"({"train_batch_size": 8, "tensorboard": {"enabled": "auto"},
      "fp16": {"fp16_master_weights_and_grads": "auto"},
      "zero_optimization": {"zero_quantized_gradients": "auto"}, "sparse_gradients": "auto"})"));
}

TEST_CASE("robustness: overrides replace either spelling, create sections, and refuse bad paths",
          "[config][override]") {
  const Config alias =
      read(R"({"train_batch_size": 8, "zero_optimization": {"prefetch_bucket_size": 7}})", 1,
           {"zero_optimization.stage3_prefetch_bucket_size=9"});
  REQUIRE(alias.zero.prefetch_bucket_size == 9);
  const Config created = read(R"({"train_batch_size": 8})", 1, {"optimizer.params.lr=1e-4"});
  REQUIRE(created.optimizer.type == OptimizerType::adamw);
  REQUIRE(created.optimizer.lr == 1e-4);
  REQUIRE(error_of(R"({"train_batch_size": 8})", 1, {"zero_optimization..stage=3"}) ==
          "override \"zero_optimization..stage\": not a key path (write keys joined by dots, like "
          "zero_optimization.stage)");
}

TEST_CASE("robustness: deprecated spellings are recorded under the keys that replaced them",
          "[config][zero]") {
  const Config gather = read(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "stage3_gather_fp16_weights_on_model_save": true}})");
  REQUIRE(resolved(gather, "zero_optimization.stage3_gather_16bit_weights_on_model_save").source ==
          Source::derived);
  const Config pin = read(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "cpu_offload_use_pin_memory": true, "offload_param": {"device": "cpu", "pin_memory": false}}})");
  REQUIRE(pin.zero.offload_optimizer.pin_memory == true);
  REQUIRE(pin.zero.offload_param.pin_memory == false);
  REQUIRE(resolved(pin, "zero_optimization.offload_optimizer.pin_memory").value == true);
}

TEST_CASE("zero: an offload's pin_memory is unset when absent, null or auto, and recorded so",
          "[config][zero]") {
  for (const char* pin : {"", R"(, "pin_memory": null)", R"(, "pin_memory": "auto")"}) {
    INFO("'" << pin << "'");
    const Config config = read(std::string(R"({"train_batch_size": 8, "zero_optimization":
        {"stage": 3, "offload_optimizer": {"device": "cpu")") +
                               pin + R"(}, "offload_param": {"device": "cpu")" + pin + "}}}");
    CHECK_FALSE(config.zero.offload_optimizer.pin_memory.has_value());
    CHECK_FALSE(config.zero.offload_param.pin_memory.has_value());
    const auto& recorded = resolved(config, "zero_optimization.offload_optimizer.pin_memory");
    CHECK(recorded.value == "auto");
    CHECK(recorded.source == Source::default_value);
  }
  const Config off = read(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": false}}})");
  CHECK(off.zero.offload_optimizer.pin_memory == false);
  REQUIRE_THAT(error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": "yes"}}})"),
               Catch::Contains("pin_memory: expected true or false"));
}

TEST_CASE("robustness: a parameter dtype equal to the precision's is accepted",
          "[config][precision]") {
  REQUIRE_NOTHROW(read(R"({"train_batch_size": 8, "bf16": {"enabled": true},
                           "data_types": {"param_dtype": "bf16"}})"));
  REQUIRE_THAT(error_of(R"({"train_batch_size": 8, "data_types": {"param_dtype": "bf16"}})"),
               Catch::StartsWith("data_types.param_dtype: \"bf16\" differs from the precision's "
                                 "dtype fp32"));
}

}  // namespace zero::config

namespace zero::config::test {

TEST_CASE("config: an \"auto\" value nothing supplies is filled with its default, and said",
          "[config]") {
  const Config config = read(
      R"({"train_micro_batch_size_per_gpu": 2,
          "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}},
          "bf16": {"enabled": "auto"}})");
  CHECK(config.optimizer.lr == 1e-3);
  CHECK(config.scheduler.warmup_num_steps == 1000);
  CHECK(config.precision == Precision::fp32);
  for (const char* key : {"optimizer.params.lr", "optimizer.params.weight_decay",
                          "scheduler.params.warmup_num_steps", "bf16.enabled"}) {
    INFO(key);
    bool said = false;
    for (const auto& line : config.infos) {
      said |=
          line.rfind(std::string(key) + ": \"auto\", and nothing supplies it: the default", 0) == 0;
    }
    CHECK(said);
  }
}

}  // namespace zero::config::test
