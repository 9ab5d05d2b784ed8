// Top-level runtime keys (clipping, printing, breakdowns), the aio, checkpoint and
// activation_checkpointing sections, and the DeepSpeed features zero does not have: accepted
// when disabled, refused when enabled.
#include <cmath>

#include <fmt/format.h>

#include "config/sections.h"

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
  return value.is_object() && ((value.contains("deepcompile") && truthy(value.at("deepcompile"))) ||
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

bool not_false(const json& value) {
  return !value.is_null() && value != false;
}

void read_aio(Section& root, Config& config) {
  Section aio = root.child("aio");
  // The ranges offload/aio.h takes: pieces of whole 4096-byte units (the strictest direct-I/O
  // alignment) up to 1 GiB, at most 1024 in flight per ring and 256 rings.
  config.aio.block_size = aio.integer({"block_size"}, 1'048'576, {4096, std::int64_t{1} << 30});
  if (config.aio.block_size % 4096 != 0) {
    root.reader().error(
        fmt::format("aio.block_size: {} is not a multiple of 4096 (direct I/O "
                    "moves whole 4096-byte units); use e.g. {}",
                    config.aio.block_size, config.aio.block_size / 4096 * 4096));
  }
  config.aio.queue_depth = aio.integer({"queue_depth"}, 8, {1, 1024});
  if (aio.has("intra_op_parallelism") && aio.has("thread_count")) {
    // The newest DeepSpeed accepts both names; intra_op_parallelism wins.
    config.aio.intra_op_parallelism = aio.integer({"intra_op_parallelism"}, 1, {1, 256});
    const auto threads = aio.integer({"thread_count"}, 1, {1, 256});
    if (threads != config.aio.intra_op_parallelism) {
      root.reader().warning(fmt::format(
          "aio.thread_count ({}) is the old name of aio.intra_op_parallelism ({}); using {}",
          threads, config.aio.intra_op_parallelism, config.aio.intra_op_parallelism));
    }
  } else {
    config.aio.intra_op_parallelism =
        aio.integer({"intra_op_parallelism", "thread_count"}, 1, {1, 256});
  }
  aio.no_effect_flag("single_submit",
                     "each ring's thread submits the pieces it has ready in one call");
  aio.no_effect_flag("overlap_events",
                     "each ring's thread submits new pieces and reaps completions in one wait");
  aio.unsupported_flag("use_gds", "GPUDirect Storage (use_gds)");
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
  // Our own key: tags past the newest keep_last are removed after a successful save.
  config.checkpoint.keep_last = checkpoint.integer({"keep_last"}, 0, kNonNegative);
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
  if (const json* n = section.raw("number_checkpoints");
      n != nullptr && !n->is_null() && !is_auto(*n)) {
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
  // zero's own: how long a rank waits for a collective before failing it (not DeepSpeed's).
  config.comm_timeout_s = root.real({"comm_timeout_s"}, 1800.0, {0.0, 1e9, true});
  config.memory_breakdown = root.boolean({"memory_breakdown"}, false);
  root.no_effect_flag("zero_allow_untested_optimizer",
                      "every optimizer zero offers is tested under every ZeRO stage");
  root.no_effect_flag("zero_force_ds_cpu_optimizer",
                      "offloaded optimizer steps always run zero's own fused CPU kernels");
  read_aio(root, config);
  read_checkpoint(root, config);
  read_activation_checkpointing(root, config);
}

void declare_foreign_sections(Section& root) {
  // Switches of DeepSpeed features that change training and that zero does not implement.
  root.unsupported_section("tensorboard",
                           "TensorBoard logging (zero-train --metrics writes JSON lines)");
  root.unsupported_section("wandb",
                           "Weights & Biases logging (zero-train --metrics writes JSON lines)");
  root.unsupported_section("csv_monitor",
                           "the CSV monitor (zero-train --metrics writes JSON lines)");
  root.unsupported_section("comet", "Comet logging (zero-train --metrics writes JSON lines)");
  root.unsupported_section("flops_profiler", "the FLOPs profiler");
  root.unsupported_section("comms_logger", "the communication logger");
  root.unsupported_section("elasticity", "elastic training");
  root.unsupported_section("autotuning", "the autotuner");
  root.unsupported_if("compression_training", any_enabled_inside, "compression training");
  root.unsupported_section("quantize_training", "quantization-aware training (MoQ)");
  root.unsupported_section("eigenvalue", "eigenvalue-based MoQ");
  root.unsupported_section("progressive_layer_drop", "progressive layer drop");
  root.unsupported_section("curriculum_learning", "curriculum learning");
  root.unsupported_section("data_efficiency", "data efficiency (sampling, routing)");
  root.unsupported_if("pipeline", pipeline_stages_above_one, "pipeline parallelism");
  root.unsupported_if("sparse_attention", present_and_not_empty, "sparse attention");
  root.unsupported_section("amp", "Apex AMP (use fp16 or bf16)");
  root.unsupported_section("torch_autocast", "torch.autocast (use fp16 or bf16)");
  root.unsupported_section("hybrid_engine", "the hybrid (RLHF) engine");
  root.unsupported_if("weight_quantization", present_and_not_empty, "weight quantization");
  root.unsupported_section("nebula", "Nebula checkpointing");
  root.unsupported_if("datastates_ckpt", not_false, "DataStates checkpointing");
  root.unsupported_if("compile", compile_on, "torch.compile / DeepCompile");
  root.unsupported_if("tensor_parallel", tensor_parallel_on, "tensor parallelism (AutoTP)");
  root.unsupported_if("expert_parallel", present_and_not_empty, "expert parallelism");
  root.declare("sequence_parallel_size", KeyClass::unsupported, "sequence parallelism");
  if (const auto sp = root.integer({"sequence_parallel_size"}, 1, kPositive); sp > 1) {
    root.reader().not_supported("sequence_parallel_size", "sequence parallelism", sp);
  }
  root.unsupported_flag("sparse_gradients", "sparse gradients");
  root.unsupported_flag("graph_harvesting", "CUDA graph harvesting");
  root.declare("gradient_allreduce_op", KeyClass::implemented,
               "\"mean\" only: summing gradients is not supported");
  if (root.choice({"gradient_allreduce_op"}, "mean", {"mean", "sum"}, true) == "sum") {
    root.reader().not_supported("gradient_allreduce_op", "summing instead of averaging gradients",
                                "sum");
  }
  root.declare("managed_gradient_accumulation", KeyClass::implemented,
               "true only: the engine keeps the accumulation boundary");
  if (!root.boolean({"managed_gradient_accumulation"}, true)) {
    root.reader().not_supported("managed_gradient_accumulation",
                                "client-managed accumulation boundaries", false);
  }

  // Accepted without effect.
  root.no_effect_flag("dump_state", "zero-config check prints the resolved config");
  root.no_effect_flag("disable_allgather", "an old DeepSpeed switch");
  root.no_effect_flag("dataloader_drop_last", "the data loader is the caller's");
  root.no_effect("vocabulary_size", "the model defines its vocabulary");
  root.no_effect("log_level", "zero's log level comes from ZERO_LOG_LEVEL");
  root.no_effect("use_data_before_expert_parallelism", "zero has no expert parallelism");
  root.no_effect("seq_parallel_communication_data_type", "zero has no sequence parallelism");
  root.no_effect("timers", "throughput timers are zero-train's");
}

}  // namespace zero::config
