// Parameters on the move: at stage 3 a module's parameters are all-gathered from every rank's
// shard for its hooks and released after (persistent small ones stay gathered until the next
// step changes them); at stages 1-2 the optimizer's updated shards are all-gathered back into
// the replicated compute copies after each step, in buckets of allgather_bucket_size.
#include <algorithm>

#include "base/error.h"
#include "engine/engine_impl.h"

namespace zero::engine {

void Engine::Impl::gather(std::size_t module) {
  if (stage != 3) return;
  for (std::size_t p : registry.module(module).params) gather_param(p);
}

void Engine::Impl::release(std::size_t module) {
  if (stage != 3) return;
  for (std::size_t p : registry.module(module).params) release_param(p, false);
}

void Engine::Impl::gather_param(std::size_t param) {
  ParamState& state = params[param];
  state.holds += 1;
  if (state.full != nullptr) return;
  const std::size_t csize = dtype_size(compute);
  const ShardShape world_shape = shard_shape(registry.param(param).numel, world);
  state.full_block = gather_arena->allocate(MemoryKind::param, world_shape.padded() * csize);
  state.full = state.full_block.ptr;
  if (world_shape.padded() == 0) return;
  Stream& stream = device->default_stream();
  comm->all_gather(shard_source(param), state.full, world_shape.shard, compute, &stream).wait();
}

void Engine::Impl::release_param(std::size_t param, bool force) {
  ParamState& state = params[param];
  if (!force) state.holds -= 1;
  if (state.full == nullptr || state.holds > 0) return;
  if (state.persistent && !force) return;
  device->default_stream().synchronize();  // the model's work on it is done
  gather_arena->release(state.full_block);
  state.full_block = {};
  state.full = nullptr;
}

// After a step the gathered persistent parameters are stale: release them, to be gathered
// again at their next use.
void Engine::Impl::drop_persistent() {
  if (stage != 3) return;
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (params[p].holds == 0) release_param(p, true);
  }
}

}  // namespace zero::engine
