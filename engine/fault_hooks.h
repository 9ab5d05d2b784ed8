// Fault hooks: the points where a test makes the engine's swap I/O fail or a checkpoint save
// fail or die, or slows super_offload's worker, to check what the engine does then (the step
// fails naming the file and keeps it; a save leaves the last good checkpoint; the next forward
// waits for the step's late groups). Tests only: set on an engine before its init with
// set_fault_hooks; nothing in zero.h or EngineOptions reaches them, and an engine without hooks
// calls none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace zero::engine {

class Engine;

struct FaultHooks {
  // Makes the NVMe swap's I/O fail (a non-zero errno for a piece), see offload/aio.h.
  std::function<int(bool write, const std::string& path, std::uint64_t offset, std::size_t bytes)>
      aio;
  // Called at points of a checkpoint save ("rank_file_written" on every rank,
  // "manifest_written" and "tag_in_place" on rank 0, "pruning"); it may throw, or end the
  // process to stand for a crash there.
  std::function<void(const std::string& point)> save;
  // Called on super_offload's worker before each speculated group's step (the group's index);
  // a test slows the worker with it, so that step() leaves groups to it.
  std::function<void(std::size_t group)> speculated_step;
};

// Before init: the engine calls `hooks` at those points from now on.
void set_fault_hooks(Engine& engine, FaultHooks hooks);

}  // namespace zero::engine
