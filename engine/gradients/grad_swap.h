// Gradient NVMe (offload_optimizer nvme with an owned gradient shard): the reduced gradient of
// each swapped step group lives on NVMe beside the group's masters and moments (its region in
// the optimizer swap file, laid out by OptimizerSwap), as ZeRO-Infinity keeps it, so host
// memory holds `slots` buffers of one group's gradient rather than bytes per parameter.
//
// A small write-back cache of groups. Backward adds reduced blocks in (add): a group comes
// into a buffer as zeros when nothing of it was written since the last step, or read back
// from the file (accumulation, or a group whose pieces arrive apart); when no buffer is left
// free the least recently used group is written out, in the background. At the step the
// groups come in increasing order (acquire, reading the next ones on disk ahead into free
// buffers) and are dropped after it (release): a stepped gradient is zero, never written.
//
// Each group's sum of squares and non-finite check are taken of what is written out, of what a
// hold() hands out, and of what is still in a buffer at the step, so the norm and the overflow
// check read nothing back and take no group twice.
//
// super_offload (docs/offload.md, "The overlapped step"): once a group's gradient is final in
// backward the speculation's worker holds it (hold: in a buffer no write-behind takes, its
// statistics taken there) for its speculated step while add() goes on with other groups, and
// lets it go (unhold: it stays dirty in its buffer, and may be written out later) so that a
// rollback can step it again.
//
// Owns: the buffers (pinned, from the offload arena), each group's place (zero, on disk, in a
// buffer) and statistics, the first I/O failure. Calls: the AsyncIO on the swap file, the CPU
// kernels (device/host_kernels.h) on the calling thread. Threads: add() runs in a host task
// in the reductions' epilogue order, one at a time; hold() and unhold() on the speculation's
// worker beside it; the rest on the engine's thread. One mutex orders them (held through the
// I/O they wait for; a hold's statistics are taken outside it). Internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <vector>

#include "base/dtype.h"
#include "device/arena.h"
#include "engine/state/optimizer_swap.h"
#include "offload/aio.h"

namespace zero::engine {

class GradSwap {
 public:
  // `group_lo[g]` and `group_elements[g]`: swapped group g's first owned flat offset and its
  // elements (the swap's groups, in order). Takes `slots` buffers of the largest group's
  // gradient from `pinned`.
  GradSwap(OptimizerSwap& swap, offload::AsyncIO& io, Arena& pinned, DType dtype, std::size_t slots,
           std::vector<std::size_t> group_lo, std::vector<std::size_t> group_elements);
  // Waits for the I/O in flight (errors then are dropped: the run has ended).
  ~GradSwap();
  GradSwap(const GradSwap&) = delete;
  GradSwap& operator=(const GradSwap&) = delete;

  // dst[flat, flat + count) += factor * src, the owned flat offsets of swapped groups (from
  // the first group's start; may span groups), as Device::accumulate rounds. Never throws: the
  // first failure is kept, later adds are dropped, and rethrow() throws it.
  void add(std::size_t flat, const void* src, DType src_dtype, std::size_t count,
           float factor) noexcept;
  // Once the adds are done (after the epilogue): waits for the writes behind them, and throws
  // the failure an add() kept or one of those writes meets, so that a failed write fails the
  // end of the backward pass, before the step uses any of it.
  void finish_adds();
  // Throws the failure an add() kept.
  void rethrow();

  // The step's statistics of every swapped group's gradient as it is now: the sum of squares
  // (double, each group's sum in order of groups) and whether an element is NaN or infinite.
  double sum_squares();
  bool any_nonfinite();

  // The step, groups in increasing order: group g's gradient in host memory, valid until
  // release(g), which makes it zero.
  const void* acquire(std::size_t group);
  void release(std::size_t group);
  // Every group's gradient back to zero (after a step, a skipped one, a load).
  void zero();

  // super_offload, on the speculation's worker: group g's gradient, final (no add() touches it
  // again before the step), in a buffer that stays until unhold(g); its statistics are taken
  // here. One group held at a time.
  const void* hold(std::size_t group);
  void unhold(std::size_t group);

  std::size_t groups() const noexcept { return lo_.size(); }

 private:
  static constexpr std::size_t kNoGroup = static_cast<std::size_t>(-1);
  enum class Place { zero, disk, slot };
  struct Slot {
    void* data = nullptr;
    std::size_t group = kNoGroup;  // the group held (kNoGroup: free)
    bool dirty = false;            // differs from what is on disk
    bool busy = false;             // a read or write in flight
    bool reading = false;
    std::size_t io_group = kNoGroup;  // the group its I/O in flight is for
    offload::Ticket ticket = 0;
    std::uint64_t used = 0;  // when last used (least recently used goes first)
    bool held = false;       // by the speculation's worker: not written out, not reused
  };
  struct Group {
    Place place = Place::zero;
    std::size_t slot = 0;  // with Place::slot
    bool on_disk = false;  // the file holds its gradient as of its last write out
    // The statistics of the group's gradient as it is (`known`): taken when it was last
    // written out or held, and forgotten when an add() changes it.
    bool known = false;
    double sum_squares = 0.0;
    bool nonfinite = false;
  };
  std::size_t group_of(std::size_t flat) const;
  std::size_t bytes_of(std::size_t group) const;
  Slot& bring(std::size_t group);  // group g in a buffer, as it is
  // The slot used longest ago, other than `except` and a held one.
  Slot* least_recent(const Slot* except);
  Slot& free_slot();                     // a buffer no group holds (may write one out)
  void write_out(Slot& slot);            // starts writing a dirty group; the slot is free after
  void settle(Slot& slot);               // waits for its I/O
  void wait_written(std::size_t group);  // before reading a group back: its write has ended
  void read_ahead(std::size_t after);
  void know(std::size_t group, const void* data);  // takes the group's statistics of `data`
  void rethrow_locked();

  OptimizerSwap& swap_;
  offload::AsyncIO& io_;
  DType dtype_;
  std::vector<std::size_t> lo_, elements_;
  std::vector<Group> groups_;
  std::vector<Slot> slots_;
  std::vector<Block> blocks_;
  Arena& pinned_;
  std::uint64_t clock_ = 0;
  std::exception_ptr failure_;
  std::mutex mutex_;
};

}  // namespace zero::engine
