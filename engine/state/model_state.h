// The model state this rank keeps, and where it lives (docs/design.md, "The model of state"):
// the replicated compute copies (stages 0-2), the owned flat buffers (fp32 masters, the owned
// gradient shard, the optimizer's moments), the stage-3 compute shards, the step's staging and
// all-gather buffers, the optimizer state on NVMe (OptimizerSwap) and the parameters'
// (ParamSwap), and the arenas and I/O they come from, all sized by the MemoryPlan.
//
// Owns: the arenas (state, optimizer offload, parameter offload, NVMe), the swap directory and
// its AsyncIO, the CPU device beside a GPU with offload and its scalar scratch. Calls: the
// device (copies, fills, casts), the CPU device on host memory, the swaps. Hands the
// GradReducer and the ParamFetcher the memory they use (allocate), and is the fetcher's
// ShardStore. The device's default stream; the CPU's for host memory. Internal to engine/.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/arena.h"
#include "device/device.h"
#include "engine/engine.h"
#include "engine/engine_context.h"
#include "engine/fault_hooks.h"
#include "engine/gradients/grad_reducer.h"
#include "engine/gradients/grad_swap.h"
#include "engine/state/optimizer_swap.h"
#include "engine/state/param_swap.h"
#include "engine/state/shard_store.h"
#include "engine/state/value_source.h"
#include "offload/aio.h"
#include "offload/swap.h"

namespace zero::engine {

class ModelState final : public ShardStore {
 public:
  ModelState(const EngineContext& context, const MemoryPlan& plan, const FaultHooks& faults);
  ~ModelState() override;
  ModelState(const ModelState&) = delete;
  ModelState& operator=(const ModelState&) = delete;

  // What the other parts get of the allocation.
  struct PartsMemory {
    std::vector<void*> full_grads;  // stages 0-1, per parameter (null for frozen ones)
    std::vector<void*> bucket_buffers;
    std::unique_ptr<Arena> grad_arena;  // stages 2-3
    GradReducer::Target reduce_target;
    std::unique_ptr<Arena> gather_arena;  // stage 3
  };
  // Makes the arenas and carves every buffer from them, in the plan's order, zeroed; with NVMe
  // creates the swap files in nvme_path/zero/<job_id>/ (job_id the same on every rank). Throws a
  // config Error, before memory is taken, when the NVMe pipeline's pinned buffers would take
  // more than half of this host's memory.
  PartsMemory allocate(const std::string& job_id);

  // Computes on the owned state: the device, or the CPU with optimizer offload.
  Device& state_device();
  // Computes on host memory: the CPU (the device itself on CPU ranks).
  Device& host_device();
  // Scratch the state device can write: the host's beside a GPU with offload, else `device`.
  float* state_scalars(float* device_scratch);

  // Stages 0-2: the replicated compute copy of a parameter.
  void* full(std::size_t param) const { return full_[param]; }
  float* master() const noexcept { return master_; }  // owned, resident prefix (null: none)
  // The owned gradient shard (with gradient NVMe its resident groups' part), or null.
  void* grad_flat() const noexcept { return grad_flat_; }
  void* moment(int m) const noexcept { return moments_[m]; }       // resident prefix, or null
  void* compute_shard() const noexcept { return compute_shard_; }  // stage 3, in memory
  void* param_staging() const noexcept { return param_staging_; }  // offload: values going up
  void* gather_buffer() const noexcept { return gather_buffer_; }  // stages 1-2: all-gather
  // Speculation with a rollback keeps the resident state twice, each copy laid out as the owned
  // flat buffers: copy 0 (master(), moment()) and copy 1, which the speculated steps write while
  // the group's current copy stays as it was. Each resident step group's current values are in
  // one of the two (copy_of): a speculated step that stands flips its group, a step taken in
  // place leaves it. master(), moment(), master_of() and the readers of whole buffers see every
  // group's current values only where unified(): unify() first (the Stepper before a step over
  // every group, checkpoints, read_param, put_state and the other writers here).
  int copy_of(std::size_t group) const noexcept {
    return group < flipped_.size() && flipped_[group] != 0 ? 1 : 0;
  }
  // Copy `copy`'s buffer `index` (0 the masters, 1 + k moment k), whatever its groups hold;
  // copy 1 is null without speculation's rollback.
  void* state_copy(int copy, std::size_t index) const noexcept {
    if (copy == 1) return other_[index];
    return index == 0 ? static_cast<void*>(master_) : moments_[index - 1];
  }
  // Group `group`'s current values are now in the other copy. When that makes every group's,
  // the copies trade names instead (nothing is copied).
  void flip(std::size_t group);
  bool unified() const noexcept { return flipped_count_ == 0; }
  // Every group's current values into copy 0: the copies trade names where most groups are
  // flipped, then the groups still flipped are copied over. Not while a step's tail runs.
  void unify();
  OptimizerSwap* swap() const noexcept { return swap_.get(); }
  ParamSwap* param_swap() const noexcept { return param_swap_.get(); }
  GradSwap* grad_swap() const noexcept { return grad_swap_.get(); }

  // The fp32 master shard of a trainable parameter (the compute copy itself for fp32 at stage
  // 0, which keeps no master).
  float* master_of(std::size_t param);
  // fp32 at stage 0 keeps no master: the replicated compute copy is the value. (Not the same as
  // master() == nullptr, which also holds when every master is swapped to NVMe.)
  bool master_is_param() const noexcept;
  // What a gather reads: the compute shard in memory (null on NVMe).
  void* shard_source(std::size_t param);
  bool swapped_param(std::size_t param) const {
    return param_swap_ != nullptr && param_swap_->swapped(param);
  }
  std::size_t owned_valid(std::size_t param) const;  // elements of this rank's shard that are real
  std::size_t group_at(std::size_t flat) const;      // the step group holding owned offset `flat`

  // Sets every parameter's value (and trainable ones' moments) from `source`, each where this
  // rank keeps it, in registration order (assign_state.cpp). Collective only through the
  // source. A failure part way leaves the state partly set.
  void assign(ValueSource& source);

  // Writes this rank's fp32 masters of owned offsets [flat, flat + count) and its moments (host
  // bytes in the state dtype; nullptr: zeros); with NVMe the swapped part goes through the
  // swap's fill buffers, in increasing order of `flat`. finish_state() writes the last group;
  // abandon_state() forgets a fill a failure interrupted.
  void put_state(std::size_t flat, const float* values, const void* const* moments_in,
                 std::size_t count);
  void finish_state();
  void abandon_state() noexcept { filling_ = kNone; }
  // Copies this rank's master of owned offsets [flat, flat + count) into `out` (device memory).
  void copy_master(std::size_t flat, std::size_t count, float* out);
  // The reverse, from host memory: the masters of owned offsets [flat, flat + count) set to
  // `values`, the moments left as they are (a swapped group is read, changed and written back).
  void write_master(std::size_t flat, std::size_t count, const float* values);

  // Sets one parameter to `values` (its full fp32 value, host memory, the same on every rank):
  // this rank's compute copy or shard, and a trainable parameter's master over its owned range;
  // the moments are kept. Between passes (assign_state.cpp).
  void write_param(std::size_t param, const float* values);

  // A failure left the state half updated: the swap files stay for inspection.
  void keep_swap_files(const std::string& why);

  // The arenas, for memory reports: state, optimizer offload, parameter offload, optimizer
  // swap, parameter swap (null where not made).
  std::array<const Arena*, 5> arenas() const;
  // Host scratch beside a GPU with offload (kScratchBytes), else 0.
  std::size_t host_scratch_bytes() const noexcept { return host_scalars_ ? kScratchBytes : 0; }

  // ---- ShardStore ----
  const void* device_shard(std::size_t param) override;
  void copy_shard(std::size_t param, void* place) override;
  void place_shard(std::size_t param, void* place, Stream& stream) override;
  bool swapped(std::size_t param) const override { return swapped_param(param); }
  std::size_t read_buffers() const override {
    return param_swap_ != nullptr ? param_swap_->read_buffers() : 0;
  }
  offload::Ticket start_read(std::size_t param, std::size_t buffer) override;
  const void* finish_read(offload::Ticket ticket, std::size_t buffer) override;

 private:
  // A parameter's compute copy (stages 0-2: `values` is the whole value) or this rank's compute
  // shard (stage 3: `values` is the shard), wherever it lives; `staging` is device memory for
  // the parameter's numel floats.
  void put_compute(std::size_t param, const float* values, float* staging);
  void check_swap_buffers() const;
  // allocate's parts: the plan's arenas, a block taken (zeroed: `count` elements of `dtype` on
  // the state device) and kept where it belongs, and where reduced blocks go.
  void make_arenas();
  void* take(const PlannedBlock& block);
  void* take_zeroed(const PlannedBlock& block, DType dtype, std::size_t count);
  void take_block(const PlannedBlock& block, const std::string& job_id, PartsMemory& parts,
                  void*& reduce_staging);
  void take_compute_shard(const PlannedBlock& block);
  GradTarget reduce_target(void* reduce_staging);
  void open_swap_io(const std::string& job_id);
  void set_up_swap();
  void set_up_grad_swap();

  const EngineContext ctx_;
  const MemoryPlan& plan_;
  const FaultHooks& faults_;
  const StateModes& modes_;
  const int rank_;                // in the shard group (EngineContext::shards)
  std::unique_ptr<Device> host_;  // beside a GPU with offload: the CPU's kernels
  float* host_scalars_ = nullptr;
  std::unique_ptr<Arena> state_arena_;    // params, owned flat buffers, bucket buffers
  std::unique_ptr<Arena> offload_arena_;  // optimizer offload: pinned owned state and staging
  std::unique_ptr<Arena> param_arena_;    // offload_param: the compute shards in host memory
  std::unique_ptr<offload::AsyncIO> aio_;
  std::unique_ptr<offload::SwapDirectory> swap_dir_;
  std::unique_ptr<Arena> nvme_arena_;
  std::unique_ptr<OptimizerSwap> swap_;    // offload_optimizer nvme
  std::unique_ptr<GradSwap> grad_swap_;    // gradient NVMe (the swapped groups' gradients)
  std::unique_ptr<ParamSwap> param_swap_;  // offload_param nvme
  std::vector<Block> blocks_;
  std::vector<void*> full_;    // per parameter, stages 0-2
  float* master_ = nullptr;    // owned flat fp32 (mixed, or fp32 at stages 1-3)
  void* grad_flat_ = nullptr;  // owned flat gradient shard (accum dtype)
  void* moments_[2] = {nullptr, nullptr};
  void* compute_shard_ = nullptr;
  void* param_staging_ = nullptr;
  void* reduce_device_ = nullptr;  // direct_reduce: the device block and its sums
  void* device_grad_ = nullptr;    // device_accumulation: the owned gradient shard on the device
  void* gather_buffer_ = nullptr;
  void* other_[3] = {nullptr, nullptr, nullptr};  // speculation: the state's second copy
  // Per resident group: its current values are in other_ (copy 1); how many are.
  std::vector<std::uint8_t> flipped_;
  std::size_t flipped_count_ = 0;
  // The copies trade names, and with them every group's flag.
  void swap_copies() noexcept;
  std::size_t filling_ = kNone;  // the swapped group being filled
};

}  // namespace zero::engine
