// Hybrid sharding's communicators (docs/multinode.md): the world cut into shard groups of
// consecutive ranks (as launchers place a node's ranks), and across them the replicas, the
// ranks that hold the same shard in each group. Internal to engine/.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "engine/collectives/agreement.h"

namespace zero::engine {

struct ShardGroups {
  std::unique_ptr<Communicator> shards;    // this rank's group: ranks g*S .. g*S + S - 1
  std::unique_ptr<Communicator> replicas;  // ranks r, r + S, r + 2S, ... for r = rank % S
};

// Collective over `world` (two splits). `group_ranks` must divide its size.
ShardGroups split_shard_groups(Communicator& world, int group_ranks);

// Collective. zero_optimization.hybrid_shard: every group's ranks run on one host and no host
// has ranks of two groups. Throws a config Error naming the ranks and hosts otherwise (a
// launcher that placed ranks round-robin across nodes, or nodes with different rank counts).
void check_groups_are_nodes(Agreement& agreement, int group_ranks);

}  // namespace zero::engine
