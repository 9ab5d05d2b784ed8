// zero_optimization: the stage, buckets, stage-3 fetch limits, offload_optimizer and
// offload_param, DeepSpeed's deprecated spellings (mapped with a warning), hybrid sharding
// (MiCS), and the ZeRO++ switches that zero does not implement.
#include <string>

#include <fmt/format.h>

#include "config/sections.h"

namespace zero::config {
namespace {

OffloadDevice parse_device(const std::string& text) {
  if (text == "cpu") return OffloadDevice::cpu;
  if (text == "nvme") return OffloadDevice::nvme;
  return OffloadDevice::none;
}

// An offload section's pin_memory: unset when absent, null or "auto" (the engine pins beside a
// GPU, where copies to page-locked memory run at the link's rate and asynchronously; DeepSpeed
// leaves it pageable), recorded as such.
std::optional<bool> read_pin_memory(Section& section) {
  const json* value = section.peek("pin_memory");
  if (value == nullptr || value->is_null() || (value->is_string() && *value == "auto")) {
    section.declare("pin_memory", KeyClass::implemented);
    section.reader().record(section.key_path("pin_memory"), "auto", Source::default_value,
                            "pinned beside a GPU, pageable on the CPU device");
    return std::nullopt;
  }
  return section.boolean({"pin_memory"}, false);
}

void read_offload_optimizer(Section& zero, Config& config) {
  Section section = zero.child("offload_optimizer");
  OffloadOptimizerConfig& offload = config.zero.offload_optimizer;
  offload.device = parse_device(section.choice({"device"}, "none", {"none", "cpu", "nvme"}));
  offload.nvme_path = section.text({"nvme_path"}, "");
  offload.buffer_count = section.integer({"buffer_count"}, 4);
  offload.pin_memory = read_pin_memory(section);
  offload.pipeline_read = section.boolean({"pipeline_read"}, false);
  offload.pipeline_write = section.boolean({"pipeline_write"}, false);
  // Our own key: elements of optimizer state kept in pinned memory with device "nvme", so the
  // capacity is memory plus disk. Whole step groups, from the first, while they fit.
  offload.max_in_cpu = section.integer({"max_in_cpu"}, 0, kNonNegative);
  section.no_effect_flag("fast_init", "swap files are allocated and written once at init");
  section.declare("ratio", KeyClass::unsupported, "partial optimizer offload (ratio < 1)");
  if (const double ratio = section.real({"ratio"}, 1.0, {0.0, 1.0}); ratio < 1.0) {
    zero.reader().error(fmt::format(
        "{}: partial optimizer offload (ZeRO-Offload++'s ratio < 1, got {}) is not supported by "
        "zero: every step group is stepped where the optimizer is offloaded. Remove ratio; to hide "
        "the offloaded step behind backward, set offload_optimizer.super_offload to true, which "
        "gives the same numbers as the step without offload",
        section.key_path("ratio"), ratio));
  }
  // SuperOffload's speculative step (docs/offload.md, "The overlapped step"); unset: the engine
  // decides at init.
  if (const json* value = section.peek("super_offload");
      value == nullptr || value->is_null() || (value->is_string() && *value == "auto")) {
    section.declare("super_offload", KeyClass::implemented);
    section.reader().record(section.key_path("super_offload"), "auto", Source::default_value,
                            "on beside a GPU with device cpu where its plan fits the machine");
    offload.super_offload_auto = offload.device != OffloadDevice::none;
  } else {
    offload.super_offload = section.boolean({"super_offload"}, false);
  }
  offload.cpuadam_cores_perc = section.real({"cpuadam_cores_perc"}, 0.8, {0.0, 1.0});
  // Our own key (docs/offload.md, "Gradients down, added").
  offload.accumulate_on_device = section.boolean({"accumulate_on_device"}, false);
  section.no_effect_flag("convert_grad_on_cpu", "gradients are cast where they are reduced");
  section.finish();
  if (offload.super_offload && offload.cpuadam_cores_perc <= 0.0) {
    zero.reader().error(
        "zero_optimization.offload_optimizer.cpuadam_cores_perc is 0: the optimizer needs a "
        "share of the cores above 0 (at least one thread is used); set a fraction in (0, 1], "
        "such as DeepSpeed's default 0.8");
  }
  if (offload.super_offload && offload.device == OffloadDevice::none) {
    zero.reader().error(
        "zero_optimization.offload_optimizer.super_offload needs the optimizer offloaded: set "
        "offload_optimizer.device to \"cpu\" or \"nvme\", or remove super_offload");
  }
  if (offload.accumulate_on_device && offload.device == OffloadDevice::none) {
    zero.reader().error(
        "zero_optimization.offload_optimizer.accumulate_on_device sums an accumulation window's "
        "offloaded gradients on the device: it needs the optimizer offloaded; set "
        "offload_optimizer.device to \"cpu\" or \"nvme\", or remove accumulate_on_device");
  }
  if (offload.device == OffloadDevice::nvme && offload.nvme_path.empty()) {
    zero.reader().error(
        "zero_optimization.offload_optimizer.nvme_path: required when device is \"nvme\" (a "
        "directory on a fast local disk for the optimizer's swap files)");
  }
  // Here rather than where the swap is made, so that zero-mem and zero-config, which read the
  // config as the engine does, refuse it too.
  if (offload.device == OffloadDevice::nvme && offload.buffer_count < 3) {
    zero.reader().error(fmt::format(
        "zero_optimization.offload_optimizer.buffer_count is {}: swapping optimizer state to "
        "NVMe needs at least 3 buffers (one read ahead, one stepping, one writing); set 3 or "
        "more, and lower sub_group_size to make each buffer smaller",
        offload.buffer_count));
  }
}

void read_offload_param(Section& zero, Config& config) {
  Section section = zero.child("offload_param");
  OffloadParamConfig& offload = config.zero.offload_param;
  offload.device = parse_device(section.choice({"device"}, "none", {"none", "cpu", "nvme"}));
  offload.nvme_path = section.text({"nvme_path"}, "");
  offload.buffer_count = section.integer({"buffer_count"}, 5);
  offload.buffer_size = section.integer({"buffer_size"}, 100'000'000);
  offload.max_in_cpu = section.integer({"max_in_cpu"}, 1'000'000'000);
  offload.pin_memory = read_pin_memory(section);
  section.finish();
  if (offload.device == OffloadDevice::nvme && offload.nvme_path.empty() &&
      config.zero.stage == 3) {
    zero.reader().error(
        "zero_optimization.offload_param.nvme_path: required when device is \"nvme\" (a "
        "directory on a fast local disk for the parameters' swap files)");
  }
}

// DeepSpeed's old boolean switches for offload, mapped onto the sections that replaced them.
void map_deprecated_offload(Section& zero, Config& config) {
  Reader& reader = zero.reader();
  struct Mapping {
    const char* old_key;
    const char* section;
  };
  for (const Mapping& mapping : {Mapping{"cpu_offload", "offload_optimizer"},
                                 Mapping{"cpu_offload_param", "offload_param"}}) {
    zero.declare(mapping.old_key, KeyClass::deprecated,
                 fmt::format("use {}.device = \"cpu\"", mapping.section));
    const json* value = zero.raw(mapping.old_key);  // stays declared as deprecated
    if (value == nullptr || value->is_null()) continue;
    if (!value->is_boolean()) {
      reader.error(fmt::format("{}: expected true or false, got {}", zero.key_path(mapping.old_key),
                               describe(*value)));
      continue;
    }
    if (zero.has(mapping.section)) {
      reader.error(fmt::format("{} is deprecated and cannot be given together with {}; keep {}",
                               zero.key_path(mapping.old_key), zero.key_path(mapping.section),
                               zero.key_path(mapping.section)));
      continue;
    }
    reader.warning(fmt::format("{} is deprecated; use {}.device = \"cpu\" (mapped)",
                               zero.key_path(mapping.old_key), zero.key_path(mapping.section)));
    const OffloadDevice device = value->get<bool>() ? OffloadDevice::cpu : OffloadDevice::none;
    if (std::string_view(mapping.section) == "offload_optimizer") {
      config.zero.offload_optimizer.device = device;
    } else {
      config.zero.offload_param.device = device;
    }
    reader.record(zero.key_path(mapping.section) + ".device",
                  std::string(offload_device_name(device)), Source::derived,
                  fmt::format("from deprecated {}", mapping.old_key));
  }
}

// cpu_offload_use_pin_memory: pins both offloads, unless their sections say otherwise.
void map_deprecated_pin_memory(Section& zero, Config& config) {
  Reader& reader = zero.reader();
  zero.declare("cpu_offload_use_pin_memory", KeyClass::deprecated,
               "use offload_optimizer.pin_memory and offload_param.pin_memory");
  const json* pin = zero.raw("cpu_offload_use_pin_memory");
  if (pin == nullptr || pin->is_null()) return;
  if (!pin->is_boolean()) {
    reader.error(
        fmt::format("zero_optimization.cpu_offload_use_pin_memory: expected true or false, got {}",
                    describe(*pin)));
    return;
  }
  reader.warning(
      "zero_optimization.cpu_offload_use_pin_memory is deprecated; use "
      "offload_optimizer.pin_memory and offload_param.pin_memory (mapped where not set)");
  const auto section_sets_pin = [&](const char* name) {
    const json* section = zero.peek(name);
    return section != nullptr && section->is_object() && section->contains("pin_memory");
  };
  for (const char* name : {"offload_optimizer", "offload_param"}) {
    if (section_sets_pin(name)) continue;
    std::optional<bool>& target = std::string_view(name) == "offload_optimizer"
                                      ? config.zero.offload_optimizer.pin_memory
                                      : config.zero.offload_param.pin_memory;
    target = pin->get<bool>();
    reader.record(zero.key_path(name) + ".pin_memory", *target, Source::derived,
                  "from deprecated cpu_offload_use_pin_memory");
  }
}

// DeepSpeed's old `"zero_optimization": true` (stage 1) or false; true when the section had
// that form (and is read).
bool read_boolean_form(Section& root, Config& config) {
  Reader& reader = root.reader();
  ZeroConfig& z = config.zero;
  // `"zero_optimization": true` is DeepSpeed's old form of stage 1.
  const json* raw = root.raw("zero_optimization");
  if (raw != nullptr && raw->is_boolean()) {
    z.stage = raw->get<bool>() ? 1 : 0;
    reader.warning(fmt::format(
        "\"zero_optimization\": {} is deprecated; write \"zero_optimization\": {{\"stage\": {}}}",
        raw->get<bool>(), z.stage));
    reader.record("zero_optimization.stage", z.stage, Source::derived,
                  "from \"zero_optimization\": true/false");
    z.overlap_comm = false;
    z.allgather_bucket_size = root.integer({"allgather_size"}, 500'000'000);
    return true;
  }
  root.declare("allgather_size", KeyClass::implemented,
               "the bucket size of the old \"zero_optimization\": true form");
  if (root.has("allgather_size")) {
    reader.error(
        "allgather_size: only read with the old \"zero_optimization\": true form; use "
        "zero_optimization.allgather_bucket_size");
  }
  return false;
}

// The stage, the buckets, the stage-3 thresholds and limits.
void read_stage_and_buckets(Section& zero, Config& config) {
  Reader& reader = zero.reader();
  ZeroConfig& z = config.zero;
  z.stage = static_cast<int>(zero.integer({"stage"}, 0, {0, 3}));
  z.reduce_scatter = zero.boolean({"reduce_scatter"}, true);
  z.reduce_bucket_size = zero.integer({"reduce_bucket_size"}, 500'000'000);
  z.allgather_bucket_size = zero.integer({"allgather_bucket_size"}, 500'000'000);

  const bool overlap_default = z.stage == 3;
  if (const json* overlap = zero.raw("overlap_comm");
      overlap == nullptr || overlap->is_null() || is_auto(*overlap)) {
    z.overlap_comm = overlap_default;
    reader.record("zero_optimization.overlap_comm", overlap_default, Source::default_value,
                  "true at stage 3 only");
  } else {
    z.overlap_comm = zero.boolean({"overlap_comm"}, overlap_default);
  }

  z.ignore_unused_parameters = zero.boolean({"ignore_unused_parameters"}, true);
  if (const json* sub_group = zero.raw("sub_group_size");
      sub_group == nullptr || sub_group->is_null() || is_auto(*sub_group)) {
    z.sub_group_size_auto = true;
    reader.record("zero_optimization.sub_group_size", "auto", Source::default_value,
                  "1e9; with super_offload, the optimizer in CPU memory and the parameters "
                  "off NVMe at stage 3, reduce_bucket_size");
  } else {
    z.sub_group_size = zero.integer({"sub_group_size"}, 1'000'000'000);
  }
  z.prefetch_bucket_size =
      zero.integer({"stage3_prefetch_bucket_size", "prefetch_bucket_size"}, 50'000'000);
  z.param_persistence_threshold =
      zero.integer({"stage3_param_persistence_threshold", "param_persistence_threshold"}, 100'000);
  z.model_persistence_threshold = zero.integer(
      {"stage3_model_persistence_threshold", "model_persistence_threshold"}, INT64_MAX);
  z.max_live_parameters =
      zero.integer({"stage3_max_live_parameters", "max_live_parameters"}, 1'000'000'000);
  z.max_reuse_distance =
      zero.integer({"stage3_max_reuse_distance", "max_reuse_distance"}, 1'000'000'000);
}

// The 16-bit weights gathered on save, under its name and its deprecated fp16 name.
void read_gather_16bit(Section& zero, Config& config) {
  Reader& reader = zero.reader();
  ZeroConfig& z = config.zero;
  // stage3_gather_fp16_weights_on_model_save is the old name of the 16-bit key.
  zero.declare("stage3_gather_fp16_weights_on_model_save", KeyClass::deprecated,
               "use stage3_gather_16bit_weights_on_model_save");
  if (zero.has("stage3_gather_fp16_weights_on_model_save")) {
    if (zero.has("stage3_gather_16bit_weights_on_model_save") ||
        zero.has("gather_16bit_weights_on_model_save")) {
      reader.error(
          "zero_optimization.stage3_gather_fp16_weights_on_model_save is deprecated and cannot be "
          "given together with stage3_gather_16bit_weights_on_model_save; keep the 16bit one");
    } else {
      reader.warning(
          "zero_optimization.stage3_gather_fp16_weights_on_model_save is deprecated; use "
          "stage3_gather_16bit_weights_on_model_save (mapped)");
    }
    const json& old = *zero.raw("stage3_gather_fp16_weights_on_model_save");
    if (const auto value = old.is_boolean() ? std::optional<bool>(old.get<bool>()) : std::nullopt) {
      z.gather_16bit_weights_on_model_save = *value;
      reader.record("zero_optimization.stage3_gather_16bit_weights_on_model_save", *value,
                    Source::derived, "from deprecated stage3_gather_fp16_weights_on_model_save");
    } else {
      reader.error(fmt::format(
          "zero_optimization.stage3_gather_fp16_weights_on_model_save: expected true or false, "
          "got {}",
          describe(old)));
    }
    zero.declare("stage3_gather_16bit_weights_on_model_save", KeyClass::implemented);
    zero.declare("gather_16bit_weights_on_model_save", KeyClass::implemented);
  } else {
    z.gather_16bit_weights_on_model_save = zero.boolean(
        {"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save"}, false);
  }
}

// The keys accepted without effect here, and those refused as not supported when enabled.
void declare_other_keys(Section& zero) {
  // Accepted without effect: these tune DeepSpeed's Python machinery or are always true here.
  zero.no_effect_flag("contiguous_gradients",
                      "every rank's shards are always one contiguous buffer per dtype");
  zero.no_effect_flag(
      "allgather_partitions",
      "updated shards are always all-gathered (the results are the same either way)");
  zero.no_effect_flag(
      "round_robin_gradients",
      "owned gradient shards are copied in bucket order (the results are the same)");
  zero.no_effect_flag("use_multi_rank_bucket_allreduce",
                      "buckets are reduced by one collective each");
  zero.no_effect_flag("load_from_fp32_weights",
                      "checkpoints always restore the fp32 master weights");
  zero.no_effect_flag("elastic_checkpoint", "every zero checkpoint loads at any world size");
  zero.no_effect("module_granularity_threshold", "modules are the ones the caller registers");
  zero.no_effect("stage3_module_granularity_threshold",
                 "modules are the ones the caller registers");
  zero.no_effect_flag("use_all_reduce_for_fetch_params", "stage 3 gathers with all-gather");
  zero.no_effect_flag("stage3_use_all_reduce_for_fetch_params", "stage 3 gathers with all-gather");
  zero.no_effect_flag("allgather_sequential", "the gather plan is fixed ahead of the step");
  zero.no_effect_flag("stage3_allgather_sequential", "the gather plan is fixed ahead of the step");
  zero.no_effect_flag("memory_efficient_linear", "a PyTorch autograd detail");
  zero.no_effect_flag("pipeline_loading_checkpoint", "a pipeline-parallel loading detail");
  zero.no_effect_flag("override_module_apply", "a PyTorch module hook detail");
  zero.no_effect_flag("log_trace_cache_warnings", "trace changes are always logged as warnings");
  zero.no_effect_flag("enable_sanity_checks",
                      "the schedule is always checked across ranks by hash");
  zero.no_effect_flag("save_muon_momentum_buffer_in_memory", "zero has no Muon optimizer");
  zero.no_effect("leaf_module", "modules are the ones the caller registers");
  zero.unsupported_flag("legacy_stage1", "the legacy stage 1 implementation");
  zero.unsupported_flag("zero_quantized_nontrainable_weights",
                        "ZeRO++ quantized non-trainable weights");
  zero.unsupported_if("zeropp_loco_param", present_and_not_empty, "ZeRO++ LoCo");
  zero.unsupported_if("zenflow", present_and_not_empty,
                      "ZenFlow (important gradient columns stepped on the device, the rest on the "
                      "CPU every few steps: an approximation)",
                      "offload_optimizer.super_offload overlaps the offloaded step with backward "
                      "and stays exact");
}

std::string divisors_of(int world) {
  std::string list;
  for (int d = 1; d <= world; ++d) {
    if (world % d == 0) list += fmt::format("{}{}", list.empty() ? "" : ", ", d);
  }
  return list;
}

// Hybrid sharding (docs/multinode.md): partitioned within groups of consecutive ranks,
// replicated across them. DeepSpeed's MiCS key gives the group's size; zero's own
// hybrid_shard makes it the ranks of a node, as FSDP's HYBRID_SHARD does.
void read_hybrid_sharding(Section& zero, Config& config) {
  ZeroConfig& z = config.zero;
  Reader& reader = zero.reader();
  const std::int64_t mics = zero.integer({"mics_shard_size"}, -1, {-1, INT64_MAX});
  z.hybrid_shard = zero.boolean({"hybrid_shard"}, false);
  zero.no_effect_flag("mics_hierarchical_params_gather",
                      "a shard group's gathers are one all-gather over the group's ranks");
  const int world = config.world_size;
  std::int64_t size = mics > 0 ? mics : 0;
  std::string from = fmt::format("{} = {}", zero.key_path("mics_shard_size"), size);
  if (z.hybrid_shard) {
    if (mics > 0) {
      reader.error(fmt::format(
          "{} and {} are both given; keep one: hybrid_shard makes the shard group a node's ranks, "
          "mics_shard_size gives its size",
          zero.key_path("hybrid_shard"), zero.key_path("mics_shard_size")));
      return;
    }
    if (config.ranks_per_node <= 0) {
      reader.error(fmt::format(
          "{}: zero cannot tell here how many ranks share a node (start the job with zero-run, "
          "mpirun or srun, or give zero-mem --ranks-per-node); or give the shard group's size "
          "with mics_shard_size",
          zero.key_path("hybrid_shard")));
      return;
    }
    size = config.ranks_per_node;
    from = fmt::format("{} (a node's {} ranks)", zero.key_path("hybrid_shard"), size);
  }
  if (size == 0) return;
  if (z.stage == 0) {
    reader.info(fmt::format(
        "{}: no effect at stage 0, where nothing is partitioned",
        z.hybrid_shard ? zero.key_path("hybrid_shard") : zero.key_path("mics_shard_size")));
    return;
  }
  if (size > world || world % size != 0) {
    reader.error(fmt::format(
        "{}: shard groups of {} ranks must divide the world of {} rank{} into equal groups; "
        "use one of {}",
        from, size, world, world == 1 ? "" : "s", divisors_of(world)));
    return;
  }
  z.shard_size = size == world ? 0 : static_cast<int>(size);
  if (z.hybrid_shard) {
    reader.record("zero_optimization.mics_shard_size", size, Source::derived,
                  "hybrid_shard: the ranks of a node");
  }
}

// ZeRO++'s hierarchical partitioning (hpZ): stage 3 keeps, beside the partition over every
// rank, a secondary copy of the gathered parameters partitioned within groups of this many
// consecutive ranks (a node's), from which they are gathered again until the step changes them.
void read_hpz(Section& zero, Config& config) {
  ZeroConfig& z = config.zero;
  Reader& reader = zero.reader();
  const std::int64_t hpz = zero.integer({"zero_hpz_partition_size"}, 1, {1, INT64_MAX});
  const std::string key = zero.key_path("zero_hpz_partition_size");
  const int world = config.world_size;
  if (hpz <= 1) return;
  if (z.stage != 3) {
    reader.info(
        fmt::format("{}: no effect at stage {}: its secondary partition serves "
                    "stage 3's gathers",
                    key, z.stage));
    return;
  }
  if (z.shard_size > 0) {
    reader.error(fmt::format(
        "{} = {} and hybrid sharding (mics_shard_size or hybrid_shard) are both given; keep one: "
        "hybrid sharding keeps gathers within a group by partitioning the whole state there, hpZ "
        "by a second copy of the parameters alone",
        key, hpz));
    return;
  }
  if (hpz > world || world % hpz != 0) {
    reader.error(fmt::format(
        "{} = {}: secondary groups of {} ranks must divide the world of {} rank{} into equal "
        "groups; use one of {}",
        key, hpz, hpz, world, world == 1 ? "" : "s", divisors_of(world)));
    return;
  }
  if (hpz == world) {
    reader.info(
        fmt::format("{} = {}: no effect: a secondary partition over the whole world "
                    "is the primary one",
                    key, hpz));
    return;
  }
  z.hpz_size = static_cast<int>(hpz);
}

// ZeRO++'s quantized communication: qwZ for stage 3's parameter gathers, qgZ for the gradients'
// reduce-scatter (stages 1-3). Both trade exactness for about half the bytes (a quarter from
// fp32); docs/multinode.md gives the error they add.
void read_quantized_communication(Section& zero, Config& config) {
  ZeroConfig& z = config.zero;
  Reader& reader = zero.reader();
  const bool weights = zero.boolean({"zero_quantized_weights"}, false);
  const bool gradients = zero.boolean({"zero_quantized_gradients"}, false);
  if (weights && z.stage != 3) {
    reader.info(fmt::format("{}: no effect at stage {}: it quantizes stage 3's parameter gathers",
                            zero.key_path("zero_quantized_weights"), z.stage));
  } else {
    z.quantized_weights = weights;
  }
  if (gradients && z.stage == 0) {
    reader.info(fmt::format(
        "{}: no effect at stage 0: it quantizes the gradients' reduce-scatter, and stage 0 "
        "all-reduces them",
        zero.key_path("zero_quantized_gradients")));
  } else if (gradients && !z.reduce_scatter) {
    reader.info(fmt::format(
        "{}: no effect with {} false: it quantizes the reduce-scatter, and the gradients are "
        "all-reduced exactly",
        zero.key_path("zero_quantized_gradients"), zero.key_path("reduce_scatter")));
  } else {
    z.quantized_gradients = gradients;
  }
  const bool check = zero.boolean({"zero_quantized_error_check"}, false);
  if (check && !z.quantized_weights && !z.quantized_gradients) {
    reader.info(fmt::format("{}: no effect: nothing is quantized",
                            zero.key_path("zero_quantized_error_check")));
  } else {
    z.quantized_error_check = check;
  }
}

// Rules across keys: optimizer offload needs a partitioning stage, parameter offload stage 3.
void check_across_keys(Reader& reader, Config& config) {
  ZeroConfig& z = config.zero;
  const auto& optimizer_offload = z.offload_optimizer.device;
  if (optimizer_offload != OffloadDevice::none && z.stage == 0) {
    reader.error(fmt::format(
        "zero_optimization.offload_optimizer.device is \"{}\" but the stage is 0; optimizer "
        "offload needs zero_optimization.stage 1, 2 or 3",
        offload_device_name(optimizer_offload)));
  }
  if (z.offload_param.device != OffloadDevice::none && z.stage != 3) {
    reader.warning(fmt::format(
        "zero_optimization.offload_param applies at stage 3 only; ignored at stage {} (as "
        "DeepSpeed does)",
        z.stage));
    z.offload_param.device = OffloadDevice::none;
    reader.record("zero_optimization.offload_param.device", "none", Source::derived,
                  "offload_param applies at stage 3 only");
  }
}

}  // namespace

void read_zero_optimization(Section& root, Config& config) {
  if (read_boolean_form(root, config)) return;
  Section zero = root.child("zero_optimization");
  read_stage_and_buckets(zero, config);
  read_gather_16bit(zero, config);
  map_deprecated_offload(zero, config);
  if (!zero.has("cpu_offload") || zero.has("offload_optimizer"))
    read_offload_optimizer(zero, config);
  else
    zero.declare("offload_optimizer", KeyClass::implemented);
  if (!zero.has("cpu_offload_param") || zero.has("offload_param"))
    read_offload_param(zero, config);
  else
    zero.declare("offload_param", KeyClass::implemented);
  map_deprecated_pin_memory(zero, config);
  declare_other_keys(zero);
  read_hybrid_sharding(zero, config);
  read_hpz(zero, config);
  read_quantized_communication(zero, config);
  zero.finish();
  check_across_keys(root.reader(), config);
}

}  // namespace zero::config
