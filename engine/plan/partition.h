// The shard geometry of ZeRO: how each parameter splits over a shard group, where each rank's
// owned shards sit in its flat buffer, and which pieces of which shards go into each gradient
// bucket. Pure arithmetic, identical on every rank, with no communicator and no memory, so that
// it is tested alone and so that hybrid sharding only changes the `ranks` passed in.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace zero::engine {

// One parameter split over a shard group of `ranks` ranks: `ranks` equal shards of
// ceil(numel / ranks) elements, rank r owning shard r. Equal shards keep every rank's layout the
// same and let one reduce-scatter of a fixed count serve every rank; the price is padding (zeros)
// past numel in the last shards, and shards that hold no element at all when numel < ranks.
// The `rank` arguments must be in [0, ranks).
struct ShardShape {
  std::size_t numel = 0;
  int ranks = 1;
  std::size_t shard = 0;  // ceil(numel / ranks); 0 when numel == 0

  std::size_t padded() const noexcept;         // shard * ranks
  std::size_t valid(int rank) const noexcept;  // elements of the parameter inside shard `rank`
  std::size_t begin(int rank) const noexcept;  // global element offset of shard `rank`
};

// Throws a usage Error when ranks < 1.
ShardShape shard_shape(std::size_t numel, int ranks);

// Each rank's owned shards of a list of parameters, one after another in one flat buffer, so the
// optimizer runs over contiguous memory. Since every shard of a parameter has the same size, the
// layout is the same on every rank. offset[i] is parameter i's shard position in elements; total
// is the sum of the shard sizes. No alignment padding: callers that need it align the buffer.
struct FlatLayout {
  std::vector<std::size_t> offset;
  std::size_t total = 0;
};

// Throws a usage Error when ranks < 1.
FlatLayout flat_layout(std::span<const std::size_t> numels, int ranks);

// A bucket holds pieces of parameters' shards laid out rank-major in a buffer of ranks * block
// elements: block q holds, for every piece in order, elements [begin, end) of shard q of that
// piece's parameter (global elements q*shard + begin .. q*shard + end). Rank-major is what makes
// one reduce-scatter of count `block` leave rank q exactly its own shard ranges, contiguous.
struct BucketPiece {
  std::size_t param = 0;  // index into the numels list
  std::size_t begin = 0;  // range within the parameter's shard, [begin, end)
  std::size_t end = 0;
  std::size_t offset = 0;  // position of the piece inside each rank's block
};

struct Bucket {
  std::vector<BucketPiece> pieces;
  std::size_t block = 0;  // elements per rank; the whole buffer is ranks * block
};

// Buckets over the parameters taken in `order` (indices into numels, e.g. the order in which
// gradients become ready in backward; not every parameter need appear). bucket_elements is the
// whole bucket across ranks (DeepSpeed's reduce_bucket_size, in elements), so each rank's block
// holds at most capacity = max(1, bucket_elements / ranks) elements.
//
// A parameter whose shard fits in capacity is never split, so its gradient is reduced in one
// collective: when it does not fit in the current bucket's remaining room, that bucket is closed
// and a new one started. A parameter whose shard is larger than capacity closes the current
// bucket (if non-empty) and is cut at multiples of capacity within its shard; the bucket of its
// last chunk stays open for the parameters that follow. Parameters with numel 0 are skipped and
// no bucket is ever empty.
//
// Throws a usage Error when ranks < 1, bucket_elements == 0, or an index in `order` is out of
// range or appears twice.
std::vector<Bucket> plan_buckets(std::span<const std::size_t> order,
                                 std::span<const std::size_t> numels, int ranks,
                                 std::size_t bucket_elements);

// The elements of piece `p` that are real parameter elements in a shard holding `valid` of
// them (ShardShape::valid); the rest of the piece is padding.
inline std::size_t piece_valid(const BucketPiece& p, std::size_t valid) noexcept {
  return p.begin >= valid ? 0 : (p.end < valid ? p.end : valid) - p.begin;
}

// Where piece `p` of bucket `b` starts in the bucket buffer for shard q (rank-major).
inline std::size_t bucket_position(const Bucket& b, const BucketPiece& p, int q) noexcept {
  return static_cast<std::size_t>(q) * b.block + p.offset;
}

}  // namespace zero::engine
