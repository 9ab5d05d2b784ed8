// super_offload: the owned gradient's sum of squares and non-finite check taken during backward,
// on the speculation's worker, as step groups become final, so that the boundary's verdict only
// adds them up (docs/offload.md, "The overlapped step").
//
// The owned shard is cut into blocks of host::kSquaresBlock elements from its start, as
// host::sum_squares cuts a span: once every step group overlapping a block is final, the block's
// sum and non-finite flag are taken. At the boundary the blocks not yet taken (those over
// elements of no group, or of groups the worker did not reach) are taken, and the blocks' sums
// are added in order: the bits host::sum_squares gives over the whole shard, so the norm, the
// clip coefficient and the verdict are the step's without speculation.
//
// Owns: the per-block sums, flags and counts of groups still to come. Thread safety:
// group_final() on the worker, the rest on the engine's thread, ordered by the Speculator
// (arm() before the worker starts a boundary's groups, finish() after it has stepped them) or,
// where the boundary leaves groups to the worker, by the Speculation's lock (finish() there
// closes the sums: the worker takes none after it).
// Internal to engine/.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "base/dtype.h"

namespace zero::engine {

class GradPartials {
 public:
  // Groups by their owned ranges [begin, end); `count` elements in the owned shard; `nonfinite`:
  // also take each block's non-finite flag (the config checks for overflow).
  GradPartials(const std::vector<std::pair<std::size_t, std::size_t>>& group_ranges,
               std::size_t count, bool nonfinite);

  // A boundary's backward begins: no block taken.
  void begin();
  // Group `group`'s gradient is final in `grad` (the owned shard, `dtype`): takes each block
  // whose groups are all final now.
  void group_final(std::size_t group, const void* grad, DType dtype);
  // Every gradient is final: takes the blocks not yet taken. Then sum_squares() and
  // any_nonfinite() hold the shard's.
  void finish(const void* grad, DType dtype);
  double sum_squares() const;
  bool any_nonfinite() const;
  // Blocks taken by group_final() since begin() (the rest finish() took).
  std::size_t taken_early() const noexcept { return taken_early_; }

 private:
  void take(std::size_t block, const void* grad, DType dtype);

  std::size_t count_;
  bool nonfinite_;
  std::vector<std::vector<std::size_t>> blocks_of_;  // per group: the blocks it overlaps
  std::vector<std::size_t> groups_over_;             // per block: the groups overlapping it
  std::vector<std::size_t> waiting_;                 // per block: of which not final yet
  std::vector<double> sums_;                         // per block
  std::vector<char> flags_, taken_;                  // per block: non-finite, taken
  std::size_t taken_early_ = 0;
};

}  // namespace zero::engine
