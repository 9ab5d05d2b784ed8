// The shard geometry alone: shard shapes, flat layouts, and the bucket plan, checked by hand on
// small cases and, on random ones, by rebuilding which elements each bucket covers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/plan/partition.h"

namespace zero::engine {
namespace {

// A bucket written out as (param, begin, end, offset) per piece, to compare with by hand.
using Piece = std::array<std::size_t, 4>;

std::vector<Piece> pieces_of(const Bucket& bucket) {
  std::vector<Piece> pieces;
  for (const auto& p : bucket.pieces) pieces.push_back({p.param, p.begin, p.end, p.offset});
  return pieces;
}

std::vector<std::size_t> blocks_of(const std::vector<Bucket>& buckets) {
  std::vector<std::size_t> blocks;
  for (const auto& bucket : buckets) blocks.push_back(bucket.block);
  return blocks;
}

std::vector<std::size_t> in_order(std::size_t count) {
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), std::size_t{0});
  return order;
}

// The message of the usage Error `plan_buckets` raises; fails the test when it raises none.
std::string plan_error(const std::vector<std::size_t>& order,
                       const std::vector<std::size_t>& numels, int ranks,
                       std::size_t bucket_elements) {
  try {
    plan_buckets(order, numels, ranks, bucket_elements);
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::usage);
    return error.what();
  }
  FAIL("expected a usage error from plan_buckets");
  return {};
}

}  // namespace

TEST_CASE("shard_shape splits into equal ceil-sized shards with padding at the end", "[engine]") {
  const ShardShape ten = shard_shape(10, 4);
  REQUIRE(ten.numel == 10);
  REQUIRE(ten.ranks == 4);
  REQUIRE(ten.shard == 3);
  REQUIRE(ten.padded() == 12);
  REQUIRE(std::vector<std::size_t>{ten.valid(0), ten.valid(1), ten.valid(2), ten.valid(3)} ==
          std::vector<std::size_t>{3, 3, 3, 1});
  REQUIRE(std::vector<std::size_t>{ten.begin(0), ten.begin(1), ten.begin(2), ten.begin(3)} ==
          std::vector<std::size_t>{0, 3, 6, 9});

  const ShardShape even = shard_shape(12, 4);
  REQUIRE(even.shard == 3);
  REQUIRE(even.padded() == 12);
  REQUIRE(even.valid(3) == 3);
}

TEST_CASE("shard_shape of a parameter smaller than the group leaves empty shards", "[engine]") {
  const ShardShape two = shard_shape(2, 4);
  REQUIRE(two.shard == 1);
  REQUIRE(two.padded() == 4);
  REQUIRE(std::vector<std::size_t>{two.valid(0), two.valid(1), two.valid(2), two.valid(3)} ==
          std::vector<std::size_t>{1, 1, 0, 0});
  REQUIRE(two.begin(3) == 3);
}

TEST_CASE("shard_shape of an empty parameter has empty shards", "[engine]") {
  const ShardShape empty = shard_shape(0, 3);
  REQUIRE(empty.shard == 0);
  REQUIRE(empty.padded() == 0);
  REQUIRE(empty.valid(0) == 0);
  REQUIRE(empty.valid(2) == 0);
  REQUIRE(empty.begin(2) == 0);
}

TEST_CASE("shard_shape over one rank is the whole parameter", "[engine]") {
  const ShardShape one = shard_shape(7, 1);
  REQUIRE(one.shard == 7);
  REQUIRE(one.padded() == 7);
  REQUIRE(one.valid(0) == 7);
  REQUIRE(one.begin(0) == 0);
}

TEST_CASE("shard_shape refuses a group of fewer than one rank", "[engine]") {
  REQUIRE_THROWS_WITH(shard_shape(10, 0), Catch::Contains("at least 1 rank, got 0"));
  REQUIRE_THROWS_AS(shard_shape(10, -2), Error);
  try {
    shard_shape(10, 0);
  } catch (const Error& error) {
    REQUIRE(error.category() == ErrorCategory::usage);
  }
}

TEST_CASE("flat_layout places each parameter's shard after the previous one", "[engine]") {
  const std::vector<std::size_t> numels{10, 3, 0, 7, 1};

  const FlatLayout two = flat_layout(numels, 2);  // shards 5, 2, 0, 4, 1
  REQUIRE(two.offset == std::vector<std::size_t>{0, 5, 7, 7, 11});
  REQUIRE(two.total == 12);

  const FlatLayout four = flat_layout(numels, 4);  // shards 3, 1, 0, 2, 1
  REQUIRE(four.offset == std::vector<std::size_t>{0, 3, 4, 4, 6});
  REQUIRE(four.total == 7);

  const FlatLayout one = flat_layout(numels, 1);
  REQUIRE(one.offset == std::vector<std::size_t>{0, 10, 13, 13, 20});
  REQUIRE(one.total == 21);

  const FlatLayout none = flat_layout({}, 3);
  REQUIRE(none.offset.empty());
  REQUIRE(none.total == 0);

  REQUIRE_THROWS_WITH(flat_layout(numels, 0), Catch::Contains("flat_layout"));
}

TEST_CASE("plan_buckets fills buckets greedily and closes one when the next shard does not fit",
          "[engine]") {
  // numels 10, 3, 7 over 2 ranks: shards 5, 2, 4; bucket 8 -> capacity 4 per rank.
  const std::vector<std::size_t> numels{10, 3, 7};

  SECTION("in parameter order") {
    const auto buckets = plan_buckets(in_order(3), numels, 2, 8);
    REQUIRE(buckets.size() == 3);
    REQUIRE(pieces_of(buckets[0]) == std::vector<Piece>{{0, 0, 4, 0}});
    REQUIRE(pieces_of(buckets[1]) == std::vector<Piece>{{0, 4, 5, 0}, {1, 0, 2, 1}});
    REQUIRE(pieces_of(buckets[2]) == std::vector<Piece>{{2, 0, 4, 0}});
    REQUIRE(blocks_of(buckets) == std::vector<std::size_t>{4, 3, 4});
  }
  SECTION("in reverse order, as backward produces them") {
    const auto buckets = plan_buckets(std::vector<std::size_t>{2, 1, 0}, numels, 2, 8);
    REQUIRE(buckets.size() == 4);
    REQUIRE(pieces_of(buckets[0]) == std::vector<Piece>{{2, 0, 4, 0}});
    REQUIRE(pieces_of(buckets[1]) == std::vector<Piece>{{1, 0, 2, 0}});
    REQUIRE(pieces_of(buckets[2]) == std::vector<Piece>{{0, 0, 4, 0}});
    REQUIRE(pieces_of(buckets[3]) == std::vector<Piece>{{0, 4, 5, 0}});
    REQUIRE(blocks_of(buckets) == std::vector<std::size_t>{4, 2, 4, 1});
  }
}

TEST_CASE("plan_buckets packs several small parameters and skips empty ones", "[engine]") {
  // Over 3 ranks: shards 2, 0, 2, 1, 2; bucket 10 -> capacity 3 per rank.
  const std::vector<std::size_t> numels{4, 0, 6, 2, 5};
  const auto buckets = plan_buckets(in_order(5), numels, 3, 10);
  REQUIRE(buckets.size() == 3);
  REQUIRE(pieces_of(buckets[0]) == std::vector<Piece>{{0, 0, 2, 0}});
  REQUIRE(pieces_of(buckets[1]) == std::vector<Piece>{{2, 0, 2, 0}, {3, 0, 1, 2}});
  REQUIRE(pieces_of(buckets[2]) == std::vector<Piece>{{4, 0, 2, 0}});
  REQUIRE(blocks_of(buckets) == std::vector<std::size_t>{2, 3, 2});

  REQUIRE(plan_buckets(std::vector<std::size_t>{1}, numels, 3, 10).empty());
  REQUIRE(plan_buckets({}, numels, 3, 10).empty());
}

TEST_CASE("plan_buckets only covers the parameters named in the order", "[engine]") {
  const std::vector<std::size_t> numels{4, 4, 4, 4};
  const auto buckets = plan_buckets(std::vector<std::size_t>{3, 1}, numels, 2, 100);
  REQUIRE(buckets.size() == 1);
  REQUIRE(pieces_of(buckets[0]) == std::vector<Piece>{{3, 0, 2, 0}, {1, 0, 2, 2}});
  REQUIRE(buckets[0].block == 4);
}

TEST_CASE("plan_buckets splits a large parameter into chunks and the next joins the last chunk",
          "[engine]") {
  // Over 4 ranks with bucket 40 -> capacity 10: the 100-element parameter has shard 25.
  const std::vector<std::size_t> numels{8, 100, 6};  // shards 2, 25, 2
  const auto buckets = plan_buckets(in_order(3), numels, 4, 40);
  REQUIRE(buckets.size() == 4);
  REQUIRE(pieces_of(buckets[0]) == std::vector<Piece>{{0, 0, 2, 0}});  // closed by the split
  REQUIRE(pieces_of(buckets[1]) == std::vector<Piece>{{1, 0, 10, 0}});
  REQUIRE(pieces_of(buckets[2]) == std::vector<Piece>{{1, 10, 20, 0}});
  REQUIRE(pieces_of(buckets[3]) == std::vector<Piece>{{1, 20, 25, 0}, {2, 0, 2, 5}});
  REQUIRE(blocks_of(buckets) == std::vector<std::size_t>{2, 10, 10, 7});
}

TEST_CASE("plan_buckets starts a new bucket after a large parameter whose last chunk is full",
          "[engine]") {
  const std::vector<std::size_t> numels{80, 4};  // over 4 ranks: shards 20, 1; capacity 10
  const auto buckets = plan_buckets(in_order(2), numels, 4, 40);
  REQUIRE(buckets.size() == 3);
  REQUIRE(pieces_of(buckets[0]) == std::vector<Piece>{{0, 0, 10, 0}});
  REQUIRE(pieces_of(buckets[1]) == std::vector<Piece>{{0, 10, 20, 0}});
  REQUIRE(pieces_of(buckets[2]) == std::vector<Piece>{{1, 0, 1, 0}});
}

TEST_CASE("plan_buckets with a bucket smaller than the group holds one element per rank",
          "[engine]") {
  const std::vector<std::size_t> numels{5, 3};  // over 4 ranks: shards 2, 1; capacity max(1, 0)
  const auto buckets = plan_buckets(in_order(2), numels, 4, 2);
  REQUIRE(buckets.size() == 3);
  REQUIRE(pieces_of(buckets[0]) == std::vector<Piece>{{0, 0, 1, 0}});
  REQUIRE(pieces_of(buckets[1]) == std::vector<Piece>{{0, 1, 2, 0}});
  REQUIRE(pieces_of(buckets[2]) == std::vector<Piece>{{1, 0, 1, 0}});
  REQUIRE(blocks_of(buckets) == std::vector<std::size_t>{1, 1, 1});
}

TEST_CASE("plan_buckets refuses an index that is repeated or out of range", "[engine]") {
  const std::vector<std::size_t> numels{4, 4, 4};
  REQUIRE_THAT(plan_error({0, 2, 0}, numels, 2, 8),
               Catch::Contains("parameter index 0 appears twice"));
  REQUIRE_THAT(plan_error({0, 3}, numels, 2, 8),
               Catch::Contains("parameter index 3 at position 1") &&
                   Catch::Contains("there are 3 parameters"));
  // Checked before planning, and for empty parameters too.
  REQUIRE_THAT(plan_error({1, 1}, {4, 0}, 2, 8), Catch::Contains("index 1 appears twice"));
  REQUIRE_THAT(plan_error({0}, {}, 2, 8), Catch::Contains("out of range"));
}

TEST_CASE("plan_buckets refuses no ranks and a bucket of zero elements", "[engine]") {
  REQUIRE_THAT(plan_error({0}, {4}, 0, 8), Catch::Contains("at least 1 rank, got 0"));
  REQUIRE_THAT(plan_error({0}, {4}, 2, 0), Catch::Contains("at least 1 element, got 0"));
}

TEST_CASE("bucket_position is the rank's block start plus the piece offset", "[engine]") {
  // The second bucket of numels 10, 3, 7 over 2 ranks with bucket 8: [p0 4..5 | p1 0..2] per
  // rank, so the buffer is p0[4], p1[0], p1[1], p0[9], p1[2], p1[3] (p1[3] is padding).
  const auto buckets = plan_buckets(in_order(3), std::vector<std::size_t>{10, 3, 7}, 2, 8);
  REQUIRE(buckets.size() == 3);
  const Bucket& bucket = buckets[1];
  REQUIRE(bucket.pieces.size() == 2);
  REQUIRE(bucket_position(bucket, bucket.pieces[0], 0) == 0);
  REQUIRE(bucket_position(bucket, bucket.pieces[1], 0) == 1);
  REQUIRE(bucket_position(bucket, bucket.pieces[0], 1) == 3);
  REQUIRE(bucket_position(bucket, bucket.pieces[1], 1) == 4);

  Bucket wide;
  wide.block = 100;
  wide.pieces.push_back(BucketPiece{0, 0, 60, 0});
  wide.pieces.push_back(BucketPiece{1, 0, 40, 60});
  REQUIRE(bucket_position(wide, wide.pieces[1], 3) == 360);
}

TEST_CASE("plan_buckets covers every shard element exactly once on random layouts", "[engine]") {
  std::mt19937 rng(20240611);
  auto uniform = [&](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };

  for (int trial = 0; trial < 2000; ++trial) {
    const int ranks = static_cast<int>(uniform(1, 5));
    // Sizes from empty and tiny to many capacities; buckets from 1 element, through fewer
    // elements than ranks, to several parameters' worth.
    const std::size_t numel_limits[] = {3, 20, 100, 600};
    std::vector<std::size_t> numels(uniform(0, 12));
    for (auto& numel : numels) numel = uniform(0, numel_limits[uniform(0, 3)]);
    const std::size_t bucket_limits[] = {1, static_cast<std::size_t>(ranks), 40, 400};
    const std::size_t bucket_elements = uniform(1, bucket_limits[uniform(0, 3)]);
    // A random subset of the parameters in a random order.
    std::vector<std::size_t> order = in_order(numels.size());
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(uniform(0, order.size()));

    INFO("trial " << trial << ": ranks " << ranks << ", bucket " << bucket_elements << ", "
                  << numels.size() << " parameters, " << order.size() << " in the order");
    const std::size_t capacity = std::max<std::size_t>(1, bucket_elements / ranks);
    const auto buckets = plan_buckets(order, numels, ranks, bucket_elements);

    std::vector<std::vector<int>> covered(numels.size());
    for (std::size_t i = 0; i < numels.size(); ++i) {
      covered[i].assign(shard_shape(numels[i], ranks).padded(), 0);
    }
    std::vector<BucketPiece> sequence;  // every piece, bucket after bucket

    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const Bucket& bucket = buckets[b];
      REQUIRE_FALSE(bucket.pieces.empty());
      REQUIRE(bucket.block <= capacity);

      std::size_t offset = 0;
      std::vector<int> buffer(static_cast<std::size_t>(ranks) * bucket.block, 0);
      for (std::size_t k = 0; k < bucket.pieces.size(); ++k) {
        const BucketPiece& piece = bucket.pieces[k];
        REQUIRE(piece.param < numels.size());
        const ShardShape shape = shard_shape(numels[piece.param], ranks);
        REQUIRE(piece.begin < piece.end);
        REQUIRE(piece.end <= shape.shard);
        REQUIRE(piece.offset == offset);
        offset += piece.end - piece.begin;

        const bool split = shape.shard > capacity;
        if (!split) {
          // A shard that fits is whole; a bucket is only closed before one that did not fit.
          REQUIRE(piece.begin == 0);
          REQUIRE(piece.end == shape.shard);
          if (k == 0 && b > 0) REQUIRE(buckets[b - 1].block + shape.shard > capacity);
        } else {
          // Chunks start at multiples of capacity, are full but for the last, each starts its
          // own bucket, and only the last shares its bucket with what follows.
          REQUIRE(k == 0);
          REQUIRE(piece.begin % capacity == 0);
          const bool last = piece.end == shape.shard;
          if (!last) {
            REQUIRE(piece.end - piece.begin == capacity);
            REQUIRE(bucket.pieces.size() == 1);
          }
        }

        for (int q = 0; q < ranks; ++q) {
          for (std::size_t e = piece.begin; e < piece.end; ++e) {
            const std::size_t global = shape.begin(q) + e;
            REQUIRE(global < covered[piece.param].size());
            ++covered[piece.param][global];
            const std::size_t position = bucket_position(bucket, piece, q) + (e - piece.begin);
            REQUIRE(position < buffer.size());
            ++buffer[position];
          }
        }
        sequence.push_back(piece);
      }
      REQUIRE(bucket.block == offset);
      REQUIRE(std::all_of(buffer.begin(), buffer.end(), [](int n) { return n == 1; }));
    }

    // Every element (padding included) of every ordered parameter exactly once; others never.
    std::vector<bool> ordered(numels.size(), false);
    for (const std::size_t i : order) ordered[i] = true;
    for (std::size_t i = 0; i < numels.size(); ++i) {
      const int expected = ordered[i] ? 1 : 0;
      REQUIRE(
          std::all_of(covered[i].begin(), covered[i].end(), [&](int n) { return n == expected; }));
    }

    // Pieces follow the order, and one parameter's pieces follow each other in its shard.
    std::vector<std::size_t> expected_params;
    for (const std::size_t i : order) {
      if (numels[i] != 0) expected_params.push_back(i);
    }
    std::vector<std::size_t> params;
    for (std::size_t k = 0; k < sequence.size(); ++k) {
      const bool continues = k > 0 && sequence[k - 1].param == sequence[k].param;
      if (continues) {
        REQUIRE(sequence[k].begin == sequence[k - 1].end);
      } else {
        REQUIRE(sequence[k].begin == 0);
        params.push_back(sequence[k].param);
      }
    }
    REQUIRE(params == expected_params);
  }
}

}  // namespace zero::engine
