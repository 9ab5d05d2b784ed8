// ShardGroups alone (engine/collectives/shard_groups.h), at the world size the program runs
// with: for every group size that divides the world, each rank's shard group holds the
// consecutive ranks of its group and its replicas the ranks that share its place in each group,
// each in world order, and a collective over each sees exactly those ranks; a size that does not
// divide is refused; and hybrid_shard's node check accepts exactly the sizes whose groups are
// whole hosts (one host on this machine, two across the multinode fixture's nodes).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <unistd.h>

#include "base/error.h"
#include "device/device.h"
#include "engine/collectives/agreement.h"
#include "engine/collectives/shard_groups.h"
#include "multirank.h"

namespace zero::testing {
namespace {

// The world ranks of `comm`'s members, in its rank order, by an all-gather of each one's.
std::vector<float> members(Communicator& comm, int world_rank) {
  const float mine = static_cast<float>(world_rank);
  std::vector<float> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(&mine, all.data(), 1, DType::f32).wait();
  return all;
}

}  // namespace

TEST_CASE("shard groups: consecutive ranks per group, and the replicas across them",
          "[engine][hybrid]") {
  Communicator& world = side_channel();
  const int n = world.size();
  const int rank = world.rank();
  for (int s = 1; s <= n; ++s) {
    if (n % s != 0) continue;
    INFO("groups of " << s << " ranks in a world of " << n);
    engine::ShardGroups groups = engine::split_shard_groups(world, s);
    REQUIRE(groups.shards != nullptr);
    REQUIRE(groups.replicas != nullptr);
    CHECK(groups.shards->size() == s);
    CHECK(groups.shards->rank() == rank % s);
    CHECK(groups.replicas->size() == n / s);
    CHECK(groups.replicas->rank() == rank / s);
    std::vector<float> shard_members, replica_members;
    for (int k = 0; k < s; ++k) shard_members.push_back(static_cast<float>(rank / s * s + k));
    for (int k = 0; k < n / s; ++k) replica_members.push_back(static_cast<float>(rank % s + k * s));
    CHECK(members(*groups.shards, rank) == shard_members);
    CHECK(members(*groups.replicas, rank) == replica_members);
  }
}

TEST_CASE("shard groups: a size that does not divide the world is refused, naming both",
          "[engine][hybrid]") {
  Communicator& world = side_channel();
  const int n = world.size();
  for (int s : {0, n + 1}) {
    try {
      engine::split_shard_groups(world, s);
      FAIL("shard groups of " << s << " ranks in a world of " << n << " were accepted");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::usage);
      CHECK_THAT(error.what(), Catch::Contains("shard groups of " + std::to_string(s)) &&
                                   Catch::Contains("world of " + std::to_string(n)));
    }
  }
}

TEST_CASE("shard groups: hybrid_shard's groups must be whole nodes", "[engine][hybrid]") {
  Communicator& world = side_channel();
  const int n = world.size();
  auto device = create_cpu_device(CpuDeviceMode::sync);
  engine::Agreement agreement(world, *device);
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  const std::vector<std::string> hosts = agreement.all_gather_text(name);
  // For every group size: accepted exactly when each group's ranks share a host and no host
  // runs ranks of two groups (one host here; two across the multinode fixture's nodes).
  int refused = 0;
  for (int s = 1; s <= n; ++s) {
    if (n % s != 0) continue;
    bool nodes = true;
    for (int r = 0; r < n; ++r) {
      for (int q = 0; q < n; ++q) {
        const bool same_group = r / s == q / s;
        if (same_group != (hosts[r] == hosts[q])) nodes = false;
      }
    }
    INFO("groups of " << s << " ranks, " << (nodes ? "whole nodes" : "not whole nodes"));
    if (nodes) {
      CHECK_NOTHROW(engine::check_groups_are_nodes(agreement, s));
      continue;
    }
    ++refused;
    try {
      engine::check_groups_are_nodes(agreement, s);
      FAIL("groups that are not whole nodes were accepted");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::config);
      CHECK_THAT(error.what(), Catch::Contains("zero_optimization.hybrid_shard") &&
                                   Catch::Contains("mics_shard_size"));
    }
  }
  if (n >= 2) CHECK(refused >= 1);  // groups of one rank share a host with another group
}

}  // namespace zero::testing
