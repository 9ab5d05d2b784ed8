// What every part of the engine reads and calls, fixed at init: the config, the registration,
// the layout (memory_plan.h) and the two services, the device and the communicators. Parts
// keep a copy (references only); none of them writes through it. Internal to engine/.
//
// Communicators: `comm` is the world (agreement, broadcasts, checks across every rank). The
// state is partitioned over shards(), the ranks of this rank's shard group: the world, or with
// hybrid sharding (StateModes::hybrid) the group of shard_ranks consecutive ranks, and
// replicas() (null without hybrid sharding) joins the ranks that hold the same shard in each
// group, over which the reduced gradient shards are summed. secondary() (ZeRO++ hpZ, stage 3)
// is the group of hpz_ranks consecutive ranks over which the gathered parameters' secondary
// copy is partitioned and gathered again.
#pragma once

#include "comm/communicator.h"
#include "config/config.h"
#include "device/device.h"
#include "engine/plan/memory_plan.h"
#include "engine/plan/registry.h"

namespace zero::engine {

struct EngineContext {
  const config::Config& config;
  const Registry& registry;
  const Layout& layout;
  Device& device;
  Communicator& comm;
  Communicator* shard_comm = nullptr;      // null: the world
  Communicator* replica_comm = nullptr;    // null: no replicas
  Communicator* secondary_comm = nullptr;  // hpZ's secondary group; null: no hpZ

  Communicator& shards() const noexcept { return shard_comm != nullptr ? *shard_comm : comm; }
  Communicator* replicas() const noexcept { return replica_comm; }
  Communicator* secondary() const noexcept { return secondary_comm; }
};

}  // namespace zero::engine
