// Optimizer state on NVMe (offload_optimizer.device = nvme): each step group's fp32 masters and
// moments live in this rank's swap file as one region, [master | moment 0 | moment 1], each
// part aligned to the file's direct-I/O alignment. The step brings the groups through
// `buffer_count` pinned buffers in order: while the optimizer runs on group i, the reads of the
// groups after it and the write of the group before it are in flight (pipeline_read,
// pipeline_write; without them each read or write is waited for at once). Groups within
// offload_optimizer.max_in_cpu elements are not swapped: they stay in pinned memory. With
// `grad_dtype` set, each group also has a gradient region in the file, after its state, which
// the GradSwap reads and writes (grad_region); this class lays it out and never touches it.
//
// With `second_regions` each group's state has a second region in the file, for super_offload's
// speculated steps (docs/offload.md): a speculated step reads the group's current region and
// writes the other, and the verdict either makes the other region current (the step stands;
// nothing is copied) or drops it (a rollback: the current region is the state before the step).
// The Stepper's worker takes the groups in the order begin_speculation gave (reading ahead
// along it), while backward runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/arena.h"
#include "offload/aio.h"
#include "offload/swap.h"

namespace zero::engine {

struct OptimizerSwapOptions {
  std::vector<std::size_t> group_elements;  // per swapped group, its owned elements
  int state_buffers = 2;                    // moments per element (Adam 2, SGD 0 or 1)
  DType state_dtype = DType::f32;
  std::size_t buffer_count = 4;  // offload_optimizer.buffer_count (at least 3)
  bool pipeline_read = false;
  bool pipeline_write = false;
  std::optional<DType> grad_dtype;  // gradient NVMe: the groups' gradient regions, in this dtype
  bool second_regions = false;      // super_offload: a second state region per group
};

// Where a group's state is while it is in a buffer.
struct GroupView {
  float* master = nullptr;
  void* state[2] = {nullptr, nullptr};
};

class OptimizerSwap {
 public:
  // Creates the swap file in `directory` (preallocated: refused when the disk lacks room) and
  // takes `buffer_count` buffers of the largest region from `pinned`. `nvme` is the nvme-tier
  // arena that places the regions (and counts their bytes by kind).
  OptimizerSwap(OptimizerSwapOptions options, offload::AsyncIO& io,
                offload::SwapDirectory& directory, Arena& pinned, Arena& nvme);
  ~OptimizerSwap();
  OptimizerSwap(const OptimizerSwap&) = delete;
  OptimizerSwap& operator=(const OptimizerSwap&) = delete;

  std::size_t groups() const noexcept { return regions_.size(); }
  const std::string& path() const noexcept;
  offload::SwapFile& file() noexcept { return *file_; }
  // Group g's gradient region in the file (bytes 0 when it has no elements, or there are none).
  struct GradRegion {
    std::uint64_t offset = 0;
    std::size_t bytes = 0;
  };
  GradRegion grad_region(std::size_t group) const { return regions_.at(group).grad; }

  // The step, for g = 0, 1, ... in order: acquire(g) waits for the group's state (issuing the
  // reads ahead the pipeline allows), release(g) writes it back; finish() waits for every
  // write. A failure throws the io Error (path, offset, what happened) and leaves the state
  // of the step undefined: the run must stop.
  GroupView acquire(std::size_t group);
  void release(std::size_t group);
  void finish();

  // Initial values: fill(g) hands out group g's buffer zeroed (moments zero); commit(g)
  // writes it. Every group is filled and committed once at init, in order.
  GroupView fill(std::size_t group);
  GroupView filled(std::size_t group);  // the buffer fill(group) handed out, again
  void commit(std::size_t group);

  // Reads group g into a buffer and returns it, outside a step (read_param, checkpoints).
  GroupView peek(std::size_t group);

  // super_offload (second_regions), a boundary's speculated steps, outside a step: the groups
  // in `order`, the order the worker steps them, each at most once (reads go ahead along it;
  // one taken out of that order is read when acquired).
  // acquire_speculated(g) waits for g's state as it stands (its current region);
  // release_speculated(g) writes the stepped state to g's other region, leaving the current one
  // as it was. end_speculation(keep) waits for every write; with `keep` each group written
  // since begin_speculation has its other region made current, else those writes are dropped.
  // Called from one thread at a time (the worker between begin and end).
  void begin_speculation(std::vector<std::size_t> order);
  GroupView acquire_speculated(std::size_t group);
  void release_speculated(std::size_t group);
  void end_speculation(bool keep);

 private:
  struct Region {
    std::size_t elements = 0;
    std::uint64_t offsets[2] = {0, 0};  // in the file: the state's regions (the second optional)
    int current = 0;                    // which of them holds the state
    std::size_t bytes = 0;
    std::size_t state_offset[2] = {0, 0};  // within the region
    GradRegion grad;                       // in the file, written on its own
  };
  struct Slot {
    void* data = nullptr;
    std::optional<std::size_t> group;  // held by this group
    bool reading = false, writing = false;
    offload::Ticket ticket = 0;
  };

  GroupView view(const Slot& slot, const Region& region) const;
  Slot& slot_of(std::size_t group) { return slots_[group % slots_.size()]; }
  void settle(Slot& slot);  // waits for the slot's I/O in flight
  // Reads group g's current state into `slot` (its I/O in flight waited for first).
  void read_into(Slot& slot, std::size_t group);
  // Writes `bytes` of `slot` at `at` in the file (waited for at once without pipeline_write).
  void write_from(Slot& slot, std::uint64_t at, std::size_t bytes);
  std::size_t reads_ahead() const;  // groups read beyond the one acquired
  // Allocates a group's master and moments from the nvme arena; returns the region's offset
  // and sets its bytes and state offsets (the second call must give the same layout).
  std::uint64_t place_state(Region& region, Arena& nvme, std::size_t alignment);
  std::uint64_t offset(const Region& region) const { return region.offsets[region.current]; }
  // super_offload: the slot of the group at `position` in the speculation's order.
  Slot& slot_at(std::size_t position) { return slots_[position % slots_.size()]; }

  OptimizerSwapOptions options_;
  offload::AsyncIO& io_;
  std::unique_ptr<offload::SwapFile> file_;
  std::vector<Region> regions_;
  std::vector<Slot> slots_;
  std::vector<Block> blocks_;
  Arena& pinned_;
  std::size_t next_read_ = 0;  // the next group whose read has not been issued this step
  // super_offload: the speculation's order, each group's position in it (kNotSpeculated: not
  // in it), the next position to read, and the groups written to their other region.
  static constexpr std::size_t kNotSpeculated = static_cast<std::size_t>(-1);
  std::vector<std::size_t> order_;
  std::vector<std::size_t> position_;
  std::size_t next_speculated_read_ = 0;
  std::vector<bool> written_other_;
  bool speculating_ = false;
};

}  // namespace zero::engine
