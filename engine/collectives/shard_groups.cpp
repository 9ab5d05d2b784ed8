// Hybrid sharding's communicators and the check of hybrid_shard's nodes (see shard_groups.h).
#include "engine/collectives/shard_groups.h"

#include <string>
#include <vector>

#include <unistd.h>

#include "base/error.h"

namespace zero::engine {

ShardGroups split_shard_groups(Communicator& world, int group_ranks) {
  const int rank = world.rank();
  if (group_ranks < 1 || world.size() % group_ranks != 0) {
    throw make_error(ErrorCategory::usage, "shard groups of {} ranks do not divide a world of {}",
                     group_ranks, world.size());
  }
  ShardGroups groups;
  groups.shards = world.split(rank / group_ranks, rank);
  groups.replicas = world.split(rank % group_ranks, rank);
  return groups;
}

void check_groups_are_nodes(Agreement& agreement, int group_ranks) {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  const std::vector<std::string> hosts = agreement.all_gather_text(name);
  const int world = static_cast<int>(hosts.size());
  for (int first = 0; first < world; first += group_ranks) {
    for (int r = first + 1; r < first + group_ranks; ++r) {
      if (hosts[r] != hosts[first]) {
        throw make_error(ErrorCategory::config,
                         "zero_optimization.hybrid_shard: ranks {}-{} form a shard group (a "
                         "node's {} ranks, consecutive), but rank {} runs on {} and rank {} on "
                         "{}; place each node's ranks together (zero-run and mpirun do so by "
                         "slot), or give the group's size with mics_shard_size",
                         first, first + group_ranks - 1, group_ranks, first, hosts[first], r,
                         hosts[r]);
      }
    }
    for (int r = first + group_ranks; r < world; ++r) {
      if (hosts[r] == hosts[first]) {
        throw make_error(ErrorCategory::config,
                         "zero_optimization.hybrid_shard: host {} runs rank {} of the shard group "
                         "of ranks {}-{} and also rank {} of another; every node needs the same "
                         "number of ranks ({} here), or give the group's size with "
                         "mics_shard_size",
                         hosts[first], first, first, first + group_ranks - 1, r, group_ranks);
      }
    }
  }
}

}  // namespace zero::engine
