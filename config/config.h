// The typed DeepSpeed-style config of a training run: every value resolved (file, caller's
// override, DeepSpeed's default, or derived from other keys), with a record of where each came
// from. Reading it applies DeepSpeed's keys, defaults and rules (batch resolution, "auto", the
// ZeRO and offload sections, optimizer and scheduler parameters) and refuses, with a message
// naming the key, what DeepSpeed users would otherwise be surprised by: unknown keys, wrong
// types and ranges, and features that change training but that zero does not implement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "config/reader.h"
#include "optim/schedule.h"
#include "optim/spec.h"

namespace zero::config {

enum class Precision { fp32, fp16, bf16 };
enum class OffloadDevice { none, cpu, nvme };
// The optimizer and the schedule are the optim library's own types: the config fills them in.
using OptimizerType = optim::OptimizerType;
using SchedulerType = optim::ScheduleType;
using WarmupType = optim::WarmupType;
using SchedulerConfig = optim::ScheduleSpec;
enum class TagValidation { ignore, warn, fail };

std::string_view precision_name(Precision precision);
std::string_view offload_device_name(OffloadDevice device);
std::string_view optimizer_name(OptimizerType type);
std::string_view scheduler_name(SchedulerType type);

struct BatchConfig {
  std::int64_t train_batch_size = 0;
  std::int64_t micro_batch_per_gpu = 0;
  std::int64_t gradient_accumulation_steps = 0;
};

struct Fp16Config {
  bool enabled = false;
  bool auto_cast = false;
  double loss_scale = 0.0;  // 0: dynamic
  std::int64_t initial_scale_power = 16;
  std::int64_t loss_scale_window = 1000;
  std::int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;

  bool dynamic() const { return loss_scale == 0.0; }
};

struct OptimizerConfig : optim::OptimizerSpec {
  std::string name = "AdamW";  // as written in the config
};

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::none;
  std::string nvme_path;
  std::int64_t buffer_count = 4;
  // Page-locked host memory; unset (absent, null or "auto"): pinned beside a GPU, pageable on
  // the CPU device (engine/plan/memory_plan.h, pinned_offload).
  std::optional<bool> pin_memory;
  bool pipeline_read = false;
  bool pipeline_write = false;
  std::int64_t max_in_cpu = 0;  // nvme: elements of optimizer state kept in memory (zero's key)
  bool fast_init = false;
  double ratio = 1.0;
  // SuperOffload: each step group is stepped as soon as its gradient is final in backward, and
  // rolled back when the boundary's clipping or skip says so (engine/stepping/speculator.h).
  bool super_offload = false;
  // super_offload absent, null or "auto": the engine decides at init (on beside a GPU with
  // device cpu where the plan with it fits the machine; docs/offload.md), super_offload false
  // until then.
  bool super_offload_auto = false;
  double cpuadam_cores_perc = 0.8;  // with super_offload: the optimizer's share of the cores
  // zero's own key: at stages 2-3 beside a GPU with gradient accumulation, a window's reduced
  // gradients are summed in an owned shard in device memory (the accumulation dtype) and go down
  // once, at the window's last micro-step, instead of being added on the host (memory_plan.h,
  // device_accumulation).
  bool accumulate_on_device = false;
};

struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::none;
  std::string nvme_path;
  std::int64_t buffer_count = 5;
  std::int64_t buffer_size = 100'000'000;
  std::int64_t max_in_cpu = 1'000'000'000;
  std::optional<bool> pin_memory;  // as OffloadOptimizerConfig's
};

struct ZeroConfig {
  int stage = 0;
  bool reduce_scatter = true;
  std::int64_t reduce_bucket_size = 500'000'000;
  std::int64_t allgather_bucket_size = 500'000'000;
  bool overlap_comm = false;  // default: true at stage 3 only
  bool ignore_unused_parameters = true;
  std::int64_t sub_group_size = 1'000'000'000;
  // sub_group_size absent, null or "auto": 1e9, except where super_offload steps the optimizer's
  // state in CPU memory at stage 3 with the parameters off NVMe, whose step groups are
  // reduce_bucket_size elements (engine/plan/memory_plan.h, step_group_size); init records the
  // size taken.
  bool sub_group_size_auto = false;
  std::int64_t prefetch_bucket_size = 50'000'000;
  std::int64_t param_persistence_threshold = 100'000;
  std::int64_t model_persistence_threshold = INT64_MAX;
  std::int64_t max_live_parameters = 1'000'000'000;
  std::int64_t max_reuse_distance = 1'000'000'000;
  bool gather_16bit_weights_on_model_save = false;
  OffloadOptimizerConfig offload_optimizer;
  OffloadParamConfig offload_param;
  // Hybrid sharding (docs/multinode.md): the model state is partitioned within groups of
  // shard_size consecutive ranks and replicated across the groups; 0: one group, the world.
  // From DeepSpeed's mics_shard_size, or zero's own hybrid_shard (a node's ranks, FSDP's
  // HYBRID_SHARD). Always 0 at stage 0, where nothing is partitioned.
  int shard_size = 0;
  bool hybrid_shard = false;
  // ZeRO++ hpZ (zero_hpz_partition_size): stage 3's secondary partition of the parameters over
  // groups of this many consecutive ranks; 0: none.
  int hpz_size = 0;
  // ZeRO++ qwZ (zero_quantized_weights): stage 3's gathers over the shard group move block
  // int8 values and scales (base/block_quant.h) instead of the compute dtype. Approximate.
  bool quantized_weights = false;
  // ZeRO++ qgZ (zero_quantized_gradients): the gradients' reduce-scatter moves block int8
  // values as an all-to-all and sums them dequantized, in fp32. Approximate.
  bool quantized_gradients = false;
  // zero's own zero_quantized_error_check: measure, per optimizer step, the quantized
  // collectives' relative error against exact ones (engine/collectives/quantization_error.h).
  bool quantized_error_check = false;
};

struct AioConfig {
  std::int64_t block_size = 1'048'576;
  std::int64_t queue_depth = 8;
  std::int64_t intra_op_parallelism = 1;
};

struct CheckpointConfig {
  TagValidation tag_validation = TagValidation::warn;
  bool load_universal = false;
  bool use_node_local_storage = false;
  // Our own key: after a successful save, only the newest keep_last tags stay (0: all).
  std::int64_t keep_last = 0;
};

struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool contiguous_memory_optimization = false;
  bool cpu_checkpointing = false;
  std::optional<std::int64_t> number_checkpoints;
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
};

struct Config {
  int world_size = 1;
  int ranks_per_node = 0;  // ReadOptions::ranks_per_node
  BatchConfig batch;
  Precision precision = Precision::fp32;
  Fp16Config fp16;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  double gradient_clipping = 0.0;
  // Seconds a collective may take before it fails with a timeout error (zero's own key).
  double comm_timeout_s = 1800.0;
  std::int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;
  DType communication_data_type = DType::f32;  // default: the compute dtype
  DType grad_accum_dtype = DType::f32;         // default: the compute dtype
  // bf16.bf16_optimizer_states: the optimizer's moments in bf16 (stochastically rounded)
  // instead of fp32; bf16 training only.
  DType optimizer_state_dtype = DType::f32;
  // bf16.check_grad_overflow (DeepSpeed's default, true): a bf16 step whose gradients hold a
  // NaN or an infinity is skipped, as an fp16 overflow is, without a loss scale to change.
  bool bf16_check_grad_overflow = true;
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  bool zero_allow_untested_optimizer = false;
  bool zero_force_ds_cpu_optimizer = true;
  ZeroConfig zero;
  AioConfig aio;
  CheckpointConfig checkpoint;
  ActivationCheckpointingConfig activation_checkpointing;

  // The compute (parameter and gradient) dtype the precision implies.
  DType compute_dtype() const;
  // A step on non-finite gradients is skipped: fp16 always, bf16 with check_grad_overflow.
  bool checks_grad_overflow() const noexcept {
    return precision == Precision::fp16 ||
           (precision == Precision::bf16 && bf16_check_grad_overflow);
  }

  // What reading found: every resolved value with its source, the keys zero knows, and the
  // info and warning lines to log (errors make reading throw instead).
  std::vector<ResolvedValue> resolved;
  std::vector<KnownKey> known;
  std::vector<std::string> infos;
  std::vector<std::string> warnings;
};

// A caller's value for a dotted key path: fills "auto" (and replaces a value in the file).
struct Override {
  std::string path;
  json value;
};

struct ReadOptions {
  int world_size = 1;
  // Ranks per node, for zero_optimization.hybrid_shard (0: unknown, which it refuses).
  int ranks_per_node = 0;
  std::vector<Override> overrides;
  std::string source = "<string>";  // names the config in messages
};

// Parses `key=value` into an Override; the value is read as JSON when it parses as JSON
// (5e8, true, [0.9, 0.95], "text"), else taken as a string. A missing `=` is a usage Error.
Override parse_override(std::string_view assignment);

// Reads a config document. Throws a config Error whose message lists every problem found,
// one per line.
Config read_config(const json& document, const ReadOptions& options);
Config read_config_text(std::string_view text, ReadOptions options);
Config read_config_file(const std::string& path, ReadOptions options);

// Logs the infos (at info) and warnings (at warn) of a read.
void log_notes(const Config& config);

// The resolved value of a dotted key, or for a section's path an object of the resolved keys
// beneath it; nullopt when nothing under that path was resolved.
std::optional<json> resolved_value(const Config& config, std::string_view key);

// A key read as "auto" (or left unset) that init has decided: its resolved entry takes the
// value, with `note` saying why, so that resolved_value and the config's report give it.
void settle_auto(Config& config, std::string_view key, json value, std::string note);

}  // namespace zero::config
