// Whether a run fits the machine, checked at init before any of the model state is reserved,
// so that a run too large is refused with the figures and the keys to lower instead of being
// ended by the kernel's OOM killer part-way.
//
// At the engine's creation every rank notes what its machine has free: host memory
// (MemAvailable, lowered to what its cgroups allow), its GPU's memory (cudaMemGetInfo), and the
// file systems under the NVMe paths in use. The notes are gathered then, so no rank has yet
// allocated its model when any rank takes them. The program then declares what it will hold
// beside the engine from that point on (its model's activations and workspaces: declare). At
// init each rank's needs (the memory plan's reservations per tier, and what was declared) are
// added up over the ranks that share a pool (host memory per machine, one GPU's memory, one file
// system) and compared with the least free that any of them noted. Every rank reaches the same
// verdict from the same gathered figures.
//
// ZERO_MEMORY_CHECK=warn logs the shortfall instead of refusing; =off skips the check; rank
// 0's setting holds for every rank.
// The rules it judges by are fit_rules.h's, which zero-mem applies too. Internal to engine/;
// owns the notes and the declarations.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "device/device.h"
#include "engine/collectives/agreement.h"
#include "engine/plan/fit_rules.h"
#include "engine/plan/memory_plan.h"

namespace zero::engine {

class MemoryFit {
 public:
  // Collective: notes and gathers what every rank's machine has free now.
  void note_free(Agreement& agreement, const Device& device, const config::Config& config,
                 const StateModes& modes);
  // Memory the program will hold beside the engine, in `tier`, described by `what`.
  void declare(Tier tier, std::uint64_t bytes, std::string what);
  // Collective: throws an out_of_memory Error on every rank, naming each pool that is short,
  // its figures and what to lower, when the plan and the declarations do not fit what was
  // noted free (ZERO_MEMORY_CHECK=warn: a warning instead).
  void check(const MemoryPlan& plan, const config::Config& config, Agreement& agreement) const;
  // Collective: whether `plan` and the declarations fit what was noted free, by check()'s
  // rules, the same answer on every rank, whatever ZERO_MEMORY_CHECK says (a choice the engine
  // makes for the caller, such as super_offload's auto, is judged even where the caller's own
  // plan is not).
  bool fits(const MemoryPlan& plan, const config::Config& config, Agreement& agreement) const;

  const std::vector<DeclaredMemory>& declared() const noexcept { return declared_; }

 private:
  std::vector<std::string> notes_;  // every rank's, as gathered (JSON text)
  bool own_gpu_memory_ = false;     // the device tier is a GPU's, not host memory
  std::vector<DeclaredMemory> declared_;
};

}  // namespace zero::engine
