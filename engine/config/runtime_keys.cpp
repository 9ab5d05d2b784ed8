// Top-level runtime keys (clipping, printing, breakdowns), the aio, checkpoint and
// activation_checkpointing sections, and the DeepSpeed features zero does not have: accepted
// when disabled, refused when enabled.
#include <cmath>

#include <fmt/format.h>

#include "engine/config/sections.h"

namespace zero::config {

bool enabled_flag_on(const json& value) {
  if (!value.is_object() || !value.contains("enabled")) return false;
  return truthy(value.at("enabled"));
}

bool truthy(const json& value) {
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number()) return value.get<double>() != 0.0;
  if (value.is_string()) return !value.get<std::string>().empty() && value != "false";
  if (value.is_array() || value.is_object()) return !value.empty();
  return false;
}

bool present_and_not_empty(const json& value) {
  return !value.is_null() && !(value.is_object() && value.empty()) && value != false;
}

namespace {

// compression_training: any technique with an "enabled": true anywhere inside.
bool any_enabled_inside(const json& value) {
  if (!value.is_object()) return false;
  for (const auto& [key, inner] : value.items()) {
    if (key == "enabled" && truthy(inner)) return true;
    if (any_enabled_inside(inner)) return true;
  }
  return false;
}

bool pipeline_stages_above_one(const json& value) {
  if (!value.is_object() || !value.contains("stages")) return false;
  const json& stages = value.at("stages");
  return stages.is_number() && stages.get<double>() > 1;
}

bool compile_on(const json& value) {
  return value.is_object() &&
         ((value.contains("deepcompile") && truthy(value.at("deepcompile"))) ||
          (value.contains("enabled") && truthy(value.at("enabled"))));
}

bool tensor_parallel_on(const json& value) {
  if (!value.is_object()) return false;
  if (value.contains("autotp_size") && value.at("autotp_size").is_number() &&
      value.at("autotp_size").get<double>() > 1) {
    return true;
  }
  for (const char* key : {"tp", "tensor_parallel"}) {
    if (value.contains(key) && value.at(key).is_object() && value.at(key).contains("tp_size") &&
        value.at(key).at("tp_size").is_number() && value.at(key).at("tp_size").get<double>() > 1) {
      return true;
    }
  }
  return false;
}

bool is_sum(const json& value) { return value.is_string() && value.get<std::string>() == "sum"; }
bool is_false(const json& value) { return value.is_boolean() && !value.get<bool>(); }
bool above_one(const json& value) { return value.is_number() && value.get<double>() > 1; }
bool not_false(const json& value) { return !value.is_null() && value != false; }

void read_aio(Section& root, Config& config) {
  Section aio = root.child("aio");
  config.aio.block_size = aio.integer({"block_size"}, 1'048'576, {512, INT64_MAX});
  config.aio.queue_depth = aio.integer({"queue_depth"}, 8, {1, 65536});
  config.aio.intra_op_parallelism =
      aio.integer({"intra_op_parallelism", "thread_count"}, 1, {1, 1024});
  config.aio.single_submit = aio.boolean({"single_submit"}, false);
  config.aio.overlap_events = aio.boolean({"overlap_events"}, true);
  aio.unsupported_if("use_gds", truthy, "GPUDirect Storage (use_gds)");
  aio.finish();
}

void read_checkpoint(Section& root, Config& config) {
  Section checkpoint = root.child("checkpoint");
  const std::string mode =
      checkpoint.choice({"tag_validation"}, "Warn", {"Ignore", "Warn", "Fail"}, true);
  config.checkpoint.tag_validation = mode == "Ignore" ? TagValidation::ignore
                                     : mode == "Fail" ? TagValidation::fail
                                                      : TagValidation::warn;
  config.checkpoint.load_universal = checkpoint.boolean({"load_universal"}, false);
  config.checkpoint.use_node_local_storage = checkpoint.boolean({"use_node_local_storage"}, false);
  if (config.checkpoint.load_universal) {
    root.reader().info(
        "checkpoint.load_universal: every zero checkpoint is universal (loads at any world size "
        "and stage); nothing to convert");
  }
  checkpoint.no_effect("parallel_write", "each rank always writes its own shard file");
  checkpoint.no_effect("checkpoint_serialization", "zero writes its own shard format");
  checkpoint.no_effect("writer", "zero writes its own shard format");
  checkpoint.finish();
}

void read_activation_checkpointing(Section& root, Config& config) {
  Section section = root.child("activation_checkpointing");
  ActivationCheckpointingConfig& ac = config.activation_checkpointing;
  ac.partition_activations = section.boolean({"partition_activations"}, false);
  ac.contiguous_memory_optimization = section.boolean({"contiguous_memory_optimization"}, false);
  ac.cpu_checkpointing = section.boolean({"cpu_checkpointing"}, false);
  if (const json* n = section.raw("number_checkpoints"); n != nullptr && !n->is_null()) {
    ac.number_checkpoints = section.integer({"number_checkpoints"}, 0, kPositive);
  }
  ac.synchronize_checkpoint_boundary = section.boolean({"synchronize_checkpoint_boundary"}, false);
  ac.profile = section.boolean({"profile"}, false);
  if (ac.partition_activations) {
    root.reader().info(
        "activation_checkpointing.partition_activations: no effect here: activations are split "
        "across model-parallel ranks, and zero has no model parallelism");
  }
  section.finish();
}

}  // namespace

void read_runtime_keys(Section& root, Config& config) {
  config.gradient_clipping = root.real({"gradient_clipping"}, 0.0, {0.0, INFINITY});
  if (const json* steps = root.raw("steps_per_print"); steps != nullptr && steps->is_null()) {
    root.reader().record("steps_per_print", 10, Source::default_value, "null");
  } else {
    config.steps_per_print = root.integer({"steps_per_print"}, 10, kPositive);
  }
  config.wall_clock_breakdown = root.boolean({"wall_clock_breakdown"}, false);
  config.memory_breakdown = root.boolean({"memory_breakdown"}, false);
  root.no_effect("zero_allow_untested_optimizer",
                 "every optimizer zero offers is tested under every ZeRO stage");
  root.no_effect("zero_force_ds_cpu_optimizer",
                 "offloaded optimizer steps always run zero's own fused CPU kernels");
  read_aio(root, config);
  read_checkpoint(root, config);
  read_activation_checkpointing(root, config);
}

void declare_foreign_sections(Section& root) {
  // Switches of DeepSpeed features that change training and that zero does not implement.
  root.unsupported_if("tensorboard", enabled_flag_on,
                      "TensorBoard logging (zero-train --metrics writes JSON lines)");
  root.unsupported_if("wandb", enabled_flag_on,
                      "Weights & Biases logging (zero-train --metrics writes JSON lines)");
  root.unsupported_if("csv_monitor", enabled_flag_on,
                      "the CSV monitor (zero-train --metrics writes JSON lines)");
  root.unsupported_if("comet", enabled_flag_on,
                      "Comet logging (zero-train --metrics writes JSON lines)");
  root.unsupported_if("flops_profiler", enabled_flag_on, "the FLOPs profiler");
  root.unsupported_if("comms_logger", enabled_flag_on, "the communication logger");
  root.unsupported_if("elasticity", enabled_flag_on, "elastic training");
  root.unsupported_if("autotuning", enabled_flag_on, "the autotuner");
  root.unsupported_if("compression_training", any_enabled_inside, "compression training");
  root.unsupported_if("quantize_training", enabled_flag_on, "quantization-aware training (MoQ)");
  root.unsupported_if("eigenvalue", enabled_flag_on, "eigenvalue-based MoQ");
  root.unsupported_if("progressive_layer_drop", enabled_flag_on, "progressive layer drop");
  root.unsupported_if("curriculum_learning", enabled_flag_on, "curriculum learning");
  root.unsupported_if("data_efficiency", enabled_flag_on, "data efficiency (sampling, routing)");
  root.unsupported_if("pipeline", pipeline_stages_above_one, "pipeline parallelism");
  root.unsupported_if("sparse_attention", present_and_not_empty, "sparse attention");
  root.unsupported_if("amp", enabled_flag_on, "Apex AMP (use fp16 or bf16)");
  root.unsupported_if("torch_autocast", enabled_flag_on, "torch.autocast (use fp16 or bf16)");
  root.unsupported_if("hybrid_engine", enabled_flag_on, "the hybrid (RLHF) engine");
  root.unsupported_if("weight_quantization", present_and_not_empty, "weight quantization");
  root.unsupported_if("nebula", enabled_flag_on, "Nebula checkpointing");
  root.unsupported_if("datastates_ckpt", not_false, "DataStates checkpointing");
  root.unsupported_if("compile", compile_on, "torch.compile / DeepCompile");
  root.unsupported_if("tensor_parallel", tensor_parallel_on, "tensor parallelism (AutoTP)");
  root.unsupported_if("expert_parallel", present_and_not_empty, "expert parallelism");
  root.unsupported_if("sequence_parallel_size", above_one, "sequence parallelism");
  root.unsupported_if("sparse_gradients", truthy, "sparse gradients");
  root.unsupported_if("graph_harvesting", truthy, "CUDA graph harvesting");
  root.unsupported_if("gradient_allreduce_op", is_sum,
                      "summing instead of averaging gradients (gradient_allreduce_op \"sum\")");
  root.unsupported_if("managed_gradient_accumulation", is_false,
                      "client-managed accumulation boundaries");

  // Accepted without effect.
  root.no_effect("dump_state", "zero-config check prints the resolved config");
  root.no_effect("disable_allgather", "an old DeepSpeed switch");
  root.no_effect("dataloader_drop_last", "the data loader is the caller's");
  root.no_effect("vocabulary_size", "the model defines its vocabulary");
  root.no_effect("log_level", "zero's log level comes from ZERO_LOG_LEVEL");
  root.no_effect("use_data_before_expert_parallelism", "zero has no expert parallelism");
  root.no_effect("seq_parallel_communication_data_type", "zero has no sequence parallelism");
  root.no_effect("timers", "throughput timers are zero-train's");
}

}  // namespace zero::config
