// The shard geometry: shard shapes, the flat layout of owned shards, and the bucket plan.
#include "engine/plan/partition.h"

#include <algorithm>

#include "base/error.h"

namespace zero::engine {

namespace {

void check_ranks(const char* function, int ranks) {
  if (ranks < 1) {
    throw make_error(ErrorCategory::usage, "{}: the shard group needs at least 1 rank, got {}",
                     function, ranks);
  }
}

// Written without numel + ranks - 1, which would overflow for numel near SIZE_MAX.
std::size_t ceil_div(std::size_t numel, std::size_t ranks) noexcept {
  return numel / ranks + (numel % ranks != 0 ? 1 : 0);
}

// Refused before planning, so the error does not depend on where in `order` the bad index is
// relative to the buckets already built.
void check_order(std::span<const std::size_t> order, std::size_t params) {
  std::vector<bool> seen(params, false);
  for (std::size_t position = 0; position < order.size(); ++position) {
    const std::size_t index = order[position];
    if (index >= params) {
      throw make_error(ErrorCategory::usage,
                       "plan_buckets: parameter index {} at position {} of the order is out of "
                       "range (there are {} parameters)",
                       index, position, params);
    }
    if (seen[index]) {
      throw make_error(ErrorCategory::usage,
                       "plan_buckets: parameter index {} appears twice in the order (again at "
                       "position {})",
                       index, position);
    }
    seen[index] = true;
  }
}

// Builds the buckets one piece at a time; `current` is the open bucket.
class Planner {
 public:
  explicit Planner(std::size_t capacity) : capacity_(capacity) {}

  std::size_t room() const noexcept { return capacity_ - current_.block; }

  void add(std::size_t param, std::size_t begin, std::size_t end) {
    current_.pieces.push_back(BucketPiece{param, begin, end, current_.block});
    current_.block += end - begin;
  }

  void close() {
    if (current_.pieces.empty()) return;
    buckets_.push_back(std::move(current_));
    current_ = Bucket{};
  }

  std::vector<Bucket> finish() {
    close();
    return std::move(buckets_);
  }

 private:
  std::size_t capacity_;
  Bucket current_;
  std::vector<Bucket> buckets_;
};

}  // namespace

std::size_t ShardShape::padded() const noexcept {
  return shard * static_cast<std::size_t>(ranks);
}

std::size_t ShardShape::valid(int rank) const noexcept {
  const std::size_t first = begin(rank);
  if (first >= numel) return 0;
  return std::min(shard, numel - first);
}

std::size_t ShardShape::begin(int rank) const noexcept {
  return static_cast<std::size_t>(rank) * shard;
}

ShardShape shard_shape(std::size_t numel, int ranks) {
  check_ranks("shard_shape", ranks);
  return ShardShape{numel, ranks, ceil_div(numel, static_cast<std::size_t>(ranks))};
}

FlatLayout flat_layout(std::span<const std::size_t> numels, int ranks) {
  check_ranks("flat_layout", ranks);
  FlatLayout layout;
  layout.offset.reserve(numels.size());
  for (const std::size_t numel : numels) {
    layout.offset.push_back(layout.total);
    layout.total += shard_shape(numel, ranks).shard;
  }
  return layout;
}

std::vector<Bucket> plan_buckets(std::span<const std::size_t> order,
                                 std::span<const std::size_t> numels, int ranks,
                                 std::size_t bucket_elements) {
  check_ranks("plan_buckets", ranks);
  if (bucket_elements == 0) {
    throw make_error(ErrorCategory::usage,
                     "plan_buckets: the bucket size must be at least 1 element, got 0");
  }
  check_order(order, numels.size());

  const std::size_t capacity = std::max<std::size_t>(1, bucket_elements / ranks);
  Planner planner(capacity);
  for (const std::size_t param : order) {
    const std::size_t shard = shard_shape(numels[param], ranks).shard;
    if (shard == 0) continue;
    if (shard <= capacity) {
      if (shard > planner.room()) planner.close();
      planner.add(param, 0, shard);
      continue;
    }
    // Every chunk starts a bucket of its own; only the last can be short, so only its bucket is
    // left open for the parameters that follow.
    for (std::size_t begin = 0; begin < shard;) {
      const std::size_t end = begin + std::min(capacity, shard - begin);
      planner.close();
      planner.add(param, begin, end);
      begin = end;
    }
  }
  return planner.finish();
}

}  // namespace zero::engine
