// What the engine lays out and reserves, computed from the config, the registered model and
// the world size alone: no device, no communicator, no memory. Engine::Impl lays out its state
// and sizes its arenas with these functions, and zero-mem predicts with the same ones, so the
// planner's figures are the engine's own arithmetic rather than a model of it.
//
// Everything here is the same on every rank: shards are padded to equal sizes (partition.h), so
// only which elements of a shard are real depends on the rank.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "device/memory.h"
#include "engine/plan/partition.h"
#include "engine/plan/registry.h"

namespace zero::engine {

inline constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// The engine's scalar scratch (the norm, the overflow flag, agreement words): one reservation
// of this many bytes on the device, and on the host beside a GPU with offload. On the device the
// Agreement's collectives take the part from kAgreementScratch on (engine/collectives/agreement.h).
inline constexpr std::size_t kScratchBytes = 4096;
inline constexpr std::size_t kAgreementScratch = 1024;
// Optimizer offload beside a GPU: the reduced blocks come down through a ring of this many
// pinned slots, so a block's copy runs while the host adds the ones before it, and the updated
// values go up through two staging buffers, so a group's CPU step runs while the group before
// it goes up (without super_offload, which has staging of its own).
inline constexpr std::size_t kReduceStagingSlots = 3;
inline constexpr std::size_t kParamStagingBuffers = 2;

// How the config places the model state.
struct StateModes {
  int stage = 0;
  // The ranks a shard group partitions the state over: 1 at stage 0 (nothing partitioned), the
  // world, or with hybrid sharding zero_optimization.shard_size; `replicas` groups of them.
  int shard_ranks = 1;
  int replicas = 1;
  // ZeRO++ hpZ (stage 3): the gathered parameters' secondary partition over groups of this
  // many consecutive ranks; 0: none.
  int hpz_ranks = 0;
  // ZeRO++ qwZ: stage 3's gathers over the shard group move block int8 chunks, packed beside
  // each gathered parameter; qgZ: the reduce-scatter is an all-to-all of block int8 chunks,
  // packed beside each bucket buffer. Only where the shard group has more than one rank.
  bool quantized_weights = false;
  bool quantized_gradients = false;
  DType compute = DType::f32;
  DType accum = DType::f32;        // the owned gradient shard (data_types.grad_accum_dtype)
  DType wire = DType::f32;         // communication_data_type
  bool mixed = false;              // bf16/fp16: fp32 masters beside the compute copy
  bool optimizer_offload = false;  // offload_optimizer cpu or nvme: owned state in host memory
  bool optimizer_nvme = false;     // offload_optimizer nvme: masters and moments swapped
  // offload_optimizer nvme with an owned gradient shard: the swapped groups' gradients are
  // swapped too, beside their masters and moments (GradSwap)
  bool grad_nvme = false;
  bool param_offload = false;  // offload_param (stage 3): compute shards in host memory
  bool param_nvme = false;     // offload_param nvme: compute shards swapped
  // offload_optimizer.super_offload (device cpu or nvme): step groups stepped speculatively
  // during the boundary's backward (Speculator), into a second copy of the resident groups'
  // state (the swapped groups' other region on NVMe), and staging for their updated values
  bool speculate = false;
  // Speculation whose verdict can undo it: gradient_clipping set, or a non-finite check (fp16,
  // bf16 with check_grad_overflow). Without one the speculated steps always stand (the
  // learning rate may not change while they run: Stepper::set_learning_rate), so there is no
  // second copy and they write the state in place.
  bool speculation_rollback = false;

  // The reduced gradient goes into an owned shard (the optimizer reads it there), not back
  // into the replicated gradients (stage 0 with the compute dtype as accumulation dtype).
  bool grad_shard() const noexcept { return stage >= 1 || accum != compute; }
  // Hybrid sharding: the state partitioned within groups and replicated across them.
  bool hybrid() const noexcept { return replicas > 1; }
  // The step's verdict (the non-finite check, the norm, the clip factor) stays on the device
  // for the optimizer to read there, never waited for by the host (StepVerdict): the optimizer
  // on the engine's device, no parameter swap, and no fp16 loss scale to update before the next
  // backward.
  bool verdict_on_device() const noexcept {
    return !optimizer_offload && !param_nvme && compute != DType::f16;
  }
};

StateModes state_modes(const config::Config& config, int world);

// Where one parameter's state sits.
struct ParamPlacement {
  ShardShape shape;                  // over the shard group
  std::size_t flat = kNone;          // trainable: its shard's offset in the owned flat buffers
  std::uint64_t global_first = 0;    // trainable: index of its first element among trainable ones
  std::size_t compute_flat = kNone;  // stage 3: offset in the compute-shard flat buffer
  bool persistent = false;           // stage 3: stays gathered (param_persistence_threshold)
  // hpZ: its shard over the secondary group, and where that shard sits in the secondary flat
  // buffer (kNone: not gathered, or persistent).
  ShardShape secondary;
  std::size_t secondary_flat = kNone;
  // Elements its gathered copy takes: padded over the shard group, or over the secondary
  // group where that is more.
  std::size_t gathered() const noexcept { return std::max(shape.padded(), secondary.padded()); }
};

// The layout of the model state, identical on every rank.
struct Layout {
  StateModes modes;
  int world = 1;
  std::vector<ParamPlacement> params;
  std::vector<std::size_t> trainable;      // trainable parameters, registration order
  std::vector<std::size_t> trainable_pos;  // parameter -> index in `trainable`, or kNone
  FlatLayout owned;                        // over `trainable`, shard_ranks
  FlatLayout compute_shards;               // stage 3: over all parameters (0 for fp32 masters)
  FlatLayout secondary;                    // hpZ: the gathered parameters over hpz_ranks
  // Reduction buckets over `trainable` indices, in the order gradients become ready (modules
  // in reverse registration order), and for each trainable parameter its buckets in order.
  std::vector<Bucket> buckets;
  std::vector<std::vector<std::size_t>> param_buckets;
  // The optimizer's steps: all-gather buckets at stages 1-2; at stages 0 and 3 one group, or
  // with offload groups of sub_group_size elements per rank (super_offload with the state in
  // CPU memory and sub_group_size unset: reduce_bucket_size elements in all).
  std::vector<Bucket> step_groups;
  std::vector<std::size_t> group_lo;  // owned flat offset where each step group starts
  // offload_optimizer nvme: the first `resident_groups` groups (whose state ends at owned
  // offset `resident_end`) stay in memory, within max_in_cpu; without NVMe, all of them.
  std::size_t resident_groups = 0;
  std::size_t resident_end = 0;
  // offload_param: compute shards before this compute-flat offset are in host memory (with
  // NVMe, those within offload_param.max_in_cpu; without it, all).
  std::size_t compute_resident_end = 0;
};

// Stage 3: a gathered parameter's block in the gather arena: its gathered copy (compute
// dtype), and with qwZ after it, at quantized_gather_offset, the shard group's packed chunks
// of its shards (shard_ranks of block_quant_bytes(shard)), which the gather moves.
std::size_t quantized_gather_offset(const Layout& layout, std::size_t param);
std::size_t gather_block_bytes(const Layout& layout, std::size_t param);
// A bucket buffer of `block` elements per rank: the gradients rank-major (wire dtype), and with
// qgZ after them, at quantized_bucket_offset, the packed chunks sent (shard_ranks of
// block_quant_bytes(block)) and then those received.
std::size_t quantized_bucket_offset(const StateModes& modes, std::size_t block);
std::size_t bucket_buffer_bytes(const StateModes& modes, std::size_t block);

// With speculation, whether each speculated group's updated values are placed during backward
// (stage 3 with the compute shards in memory: local copies, no collective whose order the
// ranks must agree on, no NVMe write) rather than after the verdict.
bool speculation_places_early(const StateModes& modes);
// Stage 3 with optimizer or parameter offload: the step groups' elements per rank.
// sub_group_size, or with super_offload, the state in CPU memory, the parameters off NVMe and
// sub_group_size unset or "auto" (bucket_sized_step_groups), reduce_bucket_size over the ranks.
bool bucket_sized_step_groups(const config::Config& config, const StateModes& modes);
std::size_t step_group_size(const config::Config& config, const StateModes& modes);
// Placed early, the pinned staging is early_staging_buffers() buffers of the largest group (two,
// or one with a single group), taken in turn by the groups in the order the worker steps them
// (a buffer again once its copies are done). Placed after the verdict, each step group's
// updated values have their own place: group g's block (in elements of the compute dtype)
// starts at offsets[g], and offsets.back() is the whole (one entry more than there are groups).
std::size_t early_staging_buffers(const Layout& layout);
// Optimizer offload: the reduced blocks' slots and the updated values' staging buffers, each
// of the largest block or group: beside a GPU kReduceStagingSlots and kParamStagingBuffers, no
// more than there are buckets and step groups; else one.
std::size_t reduce_staging_slots(const Layout& layout, bool beside);
// Optimizer offload beside a GPU without the gradient NVMe swap: each reduced block is cast to
// the accumulation dtype and scaled on the device, into a block of the largest bucket's
// (reduce_device), and where it lands on zeros (the first micro-step after a step: every one
// at gradient accumulation 1) copied from there straight into the owned shard in host memory,
// with no host arithmetic; its sum of squares (and, where the step checks, its non-finite flag)
// are taken there as it goes, a float per bucket then one flag, from reduce_device_sums_offset()
// bytes into the block.
bool direct_reduce(const Layout& layout, bool beside);
// offload_optimizer.accumulate_on_device where it applies: direct_reduce at stages 2-3 (which
// reduce every micro-step) with gradient accumulation above 1. A window's reduced blocks are
// then summed into an owned shard in device memory (device_grad, the owned shard's size in
// the accumulation dtype), the first onto zeros, and at the window's last micro-step each
// block's sum is copied from there straight into the owned shard in host memory, its sums of
// squares and non-finite flag taken on the device as direct_reduce's are: no host add at all.
bool device_accumulation(const config::Config& config, const Layout& layout, bool beside);
// super_offload left unset ("auto", config's super_offload_auto): why the engine does not turn it
// on for this run whatever the memory (empty where it may: beside a GPU, `gpu`, with the
// optimizer state in host memory at stages 1-3; then it is on where the plan with it fits the
// machine, Engine init). On the CPU device the optimizer and backward share the same cores, and
// on NVMe the second regions take disk, so those stay as the config has them.
std::string super_offload_auto_unused(const config::Config& config, bool gpu);
// Why accumulate_on_device, set, does not apply (empty where it does, or is not set).
std::string device_accumulation_unused(const config::Config& config, const Layout& layout,
                                       bool beside);
// Stage 0 on a world of one, the gradients reduced in their own dtype with no factor
// (communication_data_type the compute dtype, gradient_predivide_factor 1, no
// prescale_gradients), and no owned gradient shard: the reduction is the identity, so none runs
// and there are no bucket buffers. The gradients stay where backward wrote them.
bool identity_reduction(const config::Config& config, const Layout& layout);
// An offload section's pin_memory where given; unset, pinned beside a GPU (where the copies
// run at the link's rate only from page-locked memory, and only then asynchronously) and
// pageable on the CPU device.
bool pinned_offload(std::optional<bool> pin_memory, bool beside);
std::size_t reduce_device_sums_offset(const Layout& layout);
std::size_t param_staging_buffers(const Layout& layout, bool beside);
std::vector<std::size_t> speculation_staging_offsets(const Layout& layout);
std::size_t largest_step_group(const Layout& layout);  // elements (the block) of the largest
std::size_t speculation_staging_elements(const Layout& layout);

// Throws a config Error when a parameter's shard cannot be swapped (larger than
// offload_param.buffer_size), naming it and what to set.
Layout plan_layout(const Registry& registry, const config::Config& config, int world);

using KindBytes = std::array<std::size_t, kAllMemoryKinds.size()>;

// One arena as the engine makes it.
struct ArenaPlan {
  std::string name;  // as the engine names it in memory reports
  Tier tier = Tier::device;
  std::size_t capacity = 0;  // what it reserves; 0: the engine makes no such arena
  KindBytes held{};          // by kind, the bytes of the blocks taken at init and kept
  // By kind, the most bytes in use at once: held plus what lives a while (stage 2-3 gradients
  // and stage-3 gathered parameters, when the hooks run in the order modules were registered,
  // backward in reverse).
  KindBytes peak{};
  // False where `peak` is only the most the arena admits: stage-3 gathers fetched ahead or kept
  // for reuse (stage3_prefetch_bucket_size or stage3_max_reuse_distance above zero) depend on
  // the order hooks actually run in.
  bool peak_exact = true;

  bool made() const noexcept { return capacity != 0; }
  std::size_t held_total() const noexcept;
  std::size_t peak_total() const noexcept;
};

// What one block the ModelState takes at init holds.
enum class BlockRole {
  full_param,      // stages 0-2: a parameter's replicated compute copy (index: the parameter)
  full_grad,       // stages 0-1: a trainable parameter's replicated gradient (index: the parameter)
  master,          // the owned fp32 masters (the resident part with NVMe)
  grad_flat,       // the owned gradient shard
  moment,          // an optimizer moment (index: which), the resident part with NVMe
  reduce_staging,  // optimizer offload: this rank's reduced block, coming down
  reduce_device,   // offload beside a GPU: a reduced block cast on the device, and its sums
  device_grad,     // device_accumulation: the owned gradient shard's window sum on the device
  param_staging,   // offload: a step group's updated values, going up (every group's with
                   // speculation, each at its own offset)
  // speculation: the resident state's second copy, the masters (index 0) or a moment
  // (1 + which); a speculated step reads one copy and writes the other (ModelState)
  speculation_state,
  optimizer_swap,  // optimizer NVMe: the OptimizerSwap is set up here and takes its buffers
  grad_swap,       // gradient NVMe: the GradSwap is set up here and takes its buffers
  compute_shard,   // stage 3: the compute shards (the resident part with offload_param)
  param_swap,      // parameter NVMe: the ParamSwap is made here and takes its buffers
  bucket,          // a reduction bucket (index: which)
  gather_buffer,   // stages 1-2: the all-gather bucket after the step
};

// Which of the ModelState's arenas a block comes from.
enum class ArenaRole { state, offload, param };

// One block of the ModelState's allocation, in the order it takes them. `bytes` is what the
// block holds (counted by kind), `reserved` what it takes of the arena's capacity (bytes rounded
// up to the arena's alignment; for a swap, its buffers with their direct-I/O alignment).
struct PlannedBlock {
  BlockRole role;
  ArenaRole arena;
  MemoryKind kind;
  std::size_t bytes = 0;
  std::size_t reserved = 0;
  std::size_t index = 0;
};

// Every buffer the engine sizes, and its arenas.
struct MemoryPlan {
  // Blocks, in bytes.
  std::size_t bucket_bytes = 0;          // one reduction bucket (wire dtype, all ranks' blocks)
  std::size_t bucket_count = 0;          // 2 with overlap_comm, else 1; 0 without buckets
  std::size_t gather_bytes = 0;          // stages 1-2: the all-gather bucket after the step
  std::size_t reduce_staging_bytes = 0;  // offload: this rank's reduced blocks, coming down
                                         // (kReduceStagingSlots of the largest beside a GPU)
  std::size_t reduce_device_bytes = 0;   // direct_reduce: the device block, then its sums
  std::size_t device_grad_bytes = 0;     // device_accumulation: the owned shard on the device
  std::size_t param_staging_bytes = 0;   // offload: step groups' updated values, going up
                                         // (kParamStagingBuffers of the largest beside a GPU)
                                         // (with speculation, every group's, one after another)
  std::size_t swap_slot_bytes = 0;       // optimizer NVMe: one buffer of the largest group's region
  std::size_t swap_slots = 0;            // offload_optimizer.buffer_count (with NVMe)
  std::size_t grad_slot_bytes = 0;     // gradient NVMe: one buffer of the largest group's gradient
                                       // (aligned for direct I/O)
  std::size_t grad_slots = 0;          // offload_optimizer.buffer_count (with gradient NVMe)
  std::size_t param_bounce_bytes = 0;  // parameter NVMe: the largest shard's region
  std::size_t param_bounces = 0;       // three bounce buffers and offload_param.buffer_count
  std::size_t grad_live_peak = 0;      // stages 2-3: the walk's most gradient bytes at once
  std::size_t gather_live_peak = 0;    // stage 3: persistent plus the largest module's others

  // The blocks the ModelState takes from the state, offload and param arenas, in its order: those
  // arenas' capacities and held bytes are these blocks' sums, so what is planned is what is
  // taken.
  std::vector<PlannedBlock> blocks;

  // The arenas, in the order memory reports list them.
  ArenaPlan state;       // device: replicated params and grads, owned state, buckets
  ArenaPlan grad;        // device, stages 2-3: full gradients while they live
  ArenaPlan gather;      // device, stage 3: gathered parameters
  ArenaPlan offload;     // pinned or host, optimizer offload: owned state and staging
  ArenaPlan param;       // pinned or host, offload_param: compute shards and bounce buffers
  ArenaPlan nvme;        // optimizer swap file
  ArenaPlan param_nvme;  // parameter swap file
  // Outside the arenas: the device's scalar scratch, with offload beside a GPU the host's, and
  // with the verdict on the device (StateModes::verdict_on_device) its pinned slot.
  std::size_t device_scratch_bytes = kScratchBytes;
  std::size_t host_scratch_bytes = 0;
  std::size_t pinned_scratch_bytes = 0;

  std::array<const ArenaPlan*, 7> arenas() const noexcept;
  // Capacity of every arena of `tier`, plus the scratch in that tier.
  std::size_t reserved(Tier tier) const noexcept;
};

// `beside`: offloaded state is stepped by a host device of its own beside the engine's
// (Device::offload_beside: a GPU, or the asynchronous CPU device standing in for one), which
// has its own scalar scratch; on the synchronous CPU device there is no separate host scratch.
MemoryPlan plan_memory(const Registry& registry, const config::Config& config, const Layout& layout,
                       bool beside);

}  // namespace zero::engine
