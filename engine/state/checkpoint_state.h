// Checkpoints of the engine's state (the format is checkpoint/). Save writes this rank's
// shard of every parameter's state, read from wherever it lives (device, host, NVMe swap), into
// its own file of DIR/.<tag>.saving/; rank 0 adds meta.json, puts the directory in place of
// DIR/<tag>, moves DIR/latest and prunes (checkpoint.keep_last). Load re-splits each
// parameter's saved state for this rank's place at this world size and stage, through the
// ModelState's assign, and restores the Stepper's counters, scaler and seed. Pretrained weights
// come in the same way (pretrained.cpp).
//
// Owns nothing between calls. Calls: the ModelState (masters, moments, compute copies), the
// ParamFetcher (stage-3 shards, stale copies released), the Stepper, the Agreement (every
// rank's outcome of each step), the checkpoint format. The device's default stream, waited
// for. Internal to engine/.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "engine/collectives/agreement.h"
#include "engine/engine.h"
#include "engine/engine_context.h"
#include "engine/fault_hooks.h"
#include "engine/fetching/param_fetcher.h"
#include "engine/state/model_state.h"
#include "engine/state/value_source.h"
#include "engine/stepping/stepper.h"

namespace zero::engine {

class CheckpointState {
 public:
  struct Parts {
    ModelState& state;
    Stepper& stepper;
    ParamFetcher& fetcher;
    Agreement& agreement;
  };
  CheckpointState(const EngineContext& context, Parts parts, const FaultHooks& faults);

  // Collective. `micro_steps`: the engine's count, kept in meta.json.
  void save(const std::string& dir, const SaveOptions& save, std::int64_t micro_steps);
  // Collective. Everything that can refuse the checkpoint comes before the state changes; a
  // failure after that calls `partly` (the state is partly replaced) before it is thrown.
  LoadResult load(const std::string& dir, const LoadOptions& load,
                  const std::function<void(std::string)>& partly);
  // Collective. Pretrained safetensors weights mapped onto the parameters by name, checked on
  // every rank before anything changes, then read range by range (pretrained.cpp); `read` gives
  // a skipped parameter's current value (the engine's read_param), `partly` as for load.
  void load_pretrained(const std::string& path, const PretrainedOptions& options,
                       const std::function<std::vector<float>(std::size_t)>& read,
                       const std::function<void(std::string)>& partly);

 private:
  std::vector<std::string> state_names() const;  // the optimizer's moments
  // The ranks that write a file: the world, or with hybrid sharding the first shard group (the
  // others hold the same state); a checkpoint's world_size is their count.
  int saving_ranks() const noexcept;
  std::string write_rank_file(const std::string& staging);  // its FileEntry as JSON
  checkpoint::Manifest make_manifest(const std::string& tag, const std::string& user_data,
                                     const std::vector<std::string>& records,
                                     std::int64_t micro_steps) const;
  void prune(const std::string& dir, const std::string& keep) const;
  std::vector<const checkpoint::ParamEntry*> match(const checkpoint::Manifest& m,
                                                   const std::string& where,
                                                   bool module_only) const;

  const EngineContext ctx_;
  Parts parts_;
  const FaultHooks& faults_;
};

}  // namespace zero::engine
