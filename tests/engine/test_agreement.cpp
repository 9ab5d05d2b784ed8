// Agreement alone (engine/collectives/agreement.h), on one rank of the local communicator: a step
// that throws fails with one Error saying what failed and why, in the first failure's category;
// text, means, comparisons and broadcasts keep one rank's values. (Several ranks: the multirank
// tests' init, checkpoint and pretrained refusals.)
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "comm/backends.h"
#include "device/device.h"
#include "engine/collectives/agreement.h"
#include "tests/engine/one_rank.h"
#include "tests/scratch.h"

namespace zero::engine {

using testing::OneRank;

TEST_CASE("agreement: a failed step names the rank and what failed, in its category", "[engine]") {
  OneRank one;
  int runs = 0;
  one.agreement.agree("a step that works", [&] { ++runs; });
  CHECK(runs == 1);
  const Error error = zero::testing::error_of([&] {
    one.agreement.agree("loading the moon",
                        [&] { throw make_error(ErrorCategory::io, "the moon file is missing"); });
  });
  CHECK(error.category() == ErrorCategory::io);
  // One rank: no rank to name among several (the multirank tests check those).
  CHECK(std::string(error.what()) == "loading the moon failed: the moon file is missing");
}

TEST_CASE("agreement: text, means, comparisons and broadcasts over one rank", "[engine]") {
  OneRank one;
  CHECK(one.agreement.all_gather_text("hello") == std::vector<std::string>{"hello"});
  CHECK(one.agreement.all_gather_text("") == std::vector<std::string>{""});
  double values[3] = {1.5, -2.0, 1e6};
  one.agreement.mean(values, 3);
  CHECK(values[0] == 1.5);
  CHECK(values[1] == -2.0);
  CHECK(values[2] == 1e6);
  const std::uint64_t mine[2] = {7, 1ull << 60};
  CHECK(one.agreement.same_everywhere(mine));
  std::uint64_t rooted[2] = {3, 4};
  one.agreement.broadcast(rooted, 0);
  CHECK(rooted[0] == 3);
  CHECK(rooted[1] == 4);
}

}  // namespace zero::engine
