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
// Internal to engine/; owns the notes and the declarations.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "device/device.h"
#include "engine/collectives/agreement.h"
#include "engine/plan/memory_plan.h"

namespace zero::engine {

// Memory a program holds beside the engine (MemoryFit::declare).
struct DeclaredMemory {
  Tier tier;
  std::uint64_t bytes;
  std::string what;
};

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

  const std::vector<DeclaredMemory>& declared() const noexcept { return declared_; }

 private:
  std::vector<std::string> notes_;  // every rank's, as gathered (JSON text)
  bool own_gpu_memory_ = false;     // the device tier is a GPU's, not host memory
  std::vector<DeclaredMemory> declared_;
};

// ---- The pure parts, which zero-mem calls for the machine it is asked about ----

// What one rank's machine has free, as note_free gathers it (JSON text). A figure left out is
// not known, and its pool is not judged.
struct FreeNote {
  std::string machine;  // ranks with the same name share its host memory and disks
  std::optional<std::uint64_t> host;
  std::string host_source;  // where the host figure comes from
  struct Gpu {
    std::string id;  // ranks with the same id share the GPU
    std::uint64_t free = 0;
    std::string source;
  };
  std::optional<Gpu> gpu;
  struct Disk {
    std::string filesystem;  // swap files on one file system share it
    std::uint64_t free = 0;
    std::string path;
    std::string source;
  };
  std::optional<Disk> optimizer_disk, param_disk;  // under each nvme_path in use
};
std::string fit_note(const FreeNote& note);

// One rank's need in each pool (JSON text): the plan's arenas by tier (the device tier in the
// host's pool unless `own_gpu`), its scratch, and the declared memory, each part with the keys
// that shrink it.
std::string fit_need(const MemoryPlan& plan, const config::Config& config,
                     const std::vector<DeclaredMemory>& declared, bool own_gpu);

// A pool whose ranks need more than its least free figure, and the line that says so.
struct Shortfall {
  enum class Pool { host, gpu, disk } pool;
  std::string text;
};
// From every rank's note and need, in rank order.
std::vector<Shortfall> fit_verdict(const std::vector<std::string>& notes,
                                   const std::vector<std::string>& needs);
// The same as one text, a line per short pool; empty when everything fits.
std::string fit_shortfalls(const std::vector<std::string>& notes,
                           const std::vector<std::string>& needs);

}  // namespace zero::engine
